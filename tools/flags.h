// A small, strict command-line flag parser for the gearbox subcommands: every flag is
// declared with where its value goes; unknown flags, missing values and malformed numbers
// are errors that name the flag.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/status.h"

namespace gearbox::cli {

class Flags {
 public:
  /// `usage` is printed for --help.
  explicit Flags(std::string usage) : usage_(std::move(usage)) {}

  void flag(std::string name, bool* out) {
    specs_.push_back({std::move(name), false, [out](std::string_view) {
                        *out = true;
                        return Status();
                      }});
  }
  void flag(std::string name, std::string* out);
  void flag(std::string name, int64_t* out);
  void flag(std::string name, double* out);
  void flag(std::string name, std::vector<std::string>* out);
  /// The next bare argument goes to `out`; `required` ones must be present.
  void positional(std::string name, std::string* out, bool required);

  /// Parses `args`. Returns kInvalidArgument for bad input; sets help_requested() for -h.
  Status parse(std::span<const std::string_view> args);
  bool help_requested() const noexcept { return help_; }
  /// True when parse() saw flag `name`.
  bool given(std::string_view name) const noexcept {
    for (const std::string& g : given_) {
      if (g == name) return true;
    }
    return false;
  }
  const std::string& usage() const noexcept { return usage_; }

 private:
  struct Spec {
    std::string name;
    bool takes_value = true;
    std::function<Status(std::string_view)> set;
  };
  struct Positional {
    std::string name;
    std::string* out;
    bool required;
  };
  std::string usage_;
  std::vector<Spec> specs_;
  std::vector<Positional> positionals_;
  bool help_ = false;
  std::vector<std::string> given_;
};

/// Prints `status` as one line "gearbox COMMAND: message" to stderr and returns `code`.
int fail(std::string_view command, const Status& status, int code = 1);

}  // namespace gearbox::cli
