// gearbox: build, run, generate with and benchmark shape-regime-specialized engines.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_help.h"
#include "commands.h"
#include "runtime/device_backend.h"

namespace {

using gearbox::cli::Command;

constexpr const char* kFooter =
    "gearbox COMMAND --help describes each command.\n\n"
    "Every command exits 0 on success, 1 when its work failed and 2 on a usage error.";

// The subcommand the command line reached, or null.
const CLI::App* selected_command(const CLI::App& gearbox) {
  const std::vector<CLI::App*> parsed = gearbox.get_subcommands();
  return parsed.empty() ? nullptr : parsed.front();
}

bool looks_like_flag(const std::string& arg) {
  return arg.size() > 1 && arg[0] == '-' && !(arg[1] >= '0' && arg[1] <= '9');
}

// A CLI11 parse error in gearbox's words, for one line after "gearbox COMMAND: ".
std::string usage_message(const CLI::App& gearbox, const CLI::ParseError& e) {
  std::string what = e.what();
  const CLI::App* command = selected_command(gearbox);
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    if (command == nullptr) {
      const std::vector<std::string> extras = gearbox.remaining(false);
      if (!extras.empty()) return "unknown command '" + extras.front() + "' (try gearbox --help)";
    }
    for (const CLI::App* app : {command, &gearbox}) {
      if (app == nullptr) continue;
      const std::vector<std::string> extras = app->remaining(false);
      if (extras.empty()) continue;
      if (looks_like_flag(extras.front())) return "unknown flag '" + extras.front() + "' (see --help)";
      return "unexpected argument '" + extras.front() + "'";
    }
  }
  // A flag at the end of the line without its value: "NAME: 1 required TYPE missing".
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr && what.ends_with(" missing") &&
      what.find(':') != std::string::npos) {
    return what.substr(0, what.find(':')) + " needs a value";
  }
  return what;
}

int run(int argc, char** argv) {
  CLI::App gearbox("", "gearbox");
  gearbox.formatter(std::make_shared<gearbox::cli::HelpFormatter>());
  gearbox.set_help_flag("-h,--help", "this text");
  gearbox.require_subcommand(0, 1);
  // A flag given twice keeps the last value (a repeatable flag says otherwise).
  gearbox.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  std::vector<Command> commands = {
      gearbox::cli::add_build_command(gearbox),    gearbox::cli::add_run_command(gearbox),
      gearbox::cli::add_generate_command(gearbox), gearbox::cli::add_score_command(gearbox),
      gearbox::cli::add_inspect_command(gearbox),  gearbox::cli::add_bench_command(gearbox),
      gearbox::cli::add_devices_command(gearbox),  gearbox::cli::add_policy_command(gearbox),
  };
  CLI::App* help = gearbox.add_subcommand("help", "this text (gearbox help COMMAND: the command's)");
  std::string help_topic;
  help->add_option("COMMAND", help_topic);
  gearbox.footer(kFooter);  // after the subcommands, which would inherit it

  if (argc <= 1) {
    std::fputs(gearbox.help().c_str(), stderr);
    return 2;
  }
  try {
    gearbox.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(gearbox.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    const CLI::App* command = selected_command(gearbox);
    std::fprintf(stderr, "gearbox%s%s: %s\n", command == nullptr ? "" : " ",
                 command == nullptr ? "" : command->get_name().c_str(), usage_message(gearbox, e).c_str());
    return 2;
  }
  if (help->parsed()) {
    if (help_topic.empty()) return std::fputs(gearbox.help().c_str(), stdout) >= 0 ? 0 : 1;
    for (const Command& c : commands) {
      if (c.app->get_name() == help_topic) return std::fputs(c.app->help("gearbox").c_str(), stdout) >= 0 ? 0 : 1;
    }
    std::fprintf(stderr, "gearbox help: unknown command '%s' (try gearbox --help)\n", help_topic.c_str());
    return 2;
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  std::fputs(gearbox.help().c_str(), stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gearbox: %s\n", e.what());
  }
  // A command that touched the CUDA device (an inspection that only names its tactics, too)
  // may end while the device's background work is still inside cuBLASLt.
  gearbox::internal::finish_device_background_work();
  return rc;
}
