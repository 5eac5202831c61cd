// The layout of `gearbox --help` and `gearbox COMMAND --help`, generated from the CLI11
// apps and options:
//
//   usage: gearbox bench FILE [options]
//
//   <the command's description, wrapped>
//
//   options:
//     --steps N          decode steps per measurement (default 64)
//
//   <the command's footer, wrapped>
//
// An app's description is a summary line, then optionally a blank line and more text; the
// list of commands shows the summary line alone. A default shows when the option has one
// (CLI11's capture_default_str / default_str).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace gearbox::cli {

class HelpFormatter final : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override;
};

}  // namespace gearbox::cli
