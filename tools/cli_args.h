// The command-line values the gearbox subcommands share, as CLI11 options: whole numbers,
// numbers, comma-separated lists of whole numbers and `--profile NAME:MIN:OPT:MAX` (each
// bound N or BxS), each
// parsed strictly (decimal, nothing left over, inside int64). A bad value is a CLI11
// ValidationError whose message names the flag and the value ("--seq: '1x' is not a whole
// number"), which gearbox_main.cpp prints as a usage error (exit 2).
//
//   int64_t steps = 64;
//   add_int_option(app, "--steps", steps, "decode steps per measurement")->capture_default_str();
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/status.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace gearbox::cli {

/// A profile from `--profile NAME:MIN:OPT:MAX`: sequence bounds, and batch bounds where a
/// bound is written BxS (a plain N is 1xN).
struct SeqProfile {
  std::string name;
  int64_t min = 0;
  int64_t opt = 0;
  int64_t max = 0;
  int64_t min_batch = 1;
  int64_t opt_batch = 1;
  int64_t max_batch = 1;
};

/// Parses a whole decimal int64 ("12"; not "12x", "", " 1"). `what` names it in errors.
Result<int64_t> parse_int(std::string_view text, std::string_view what);
/// Parses "1,2,3" into integers.
Result<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view what);
/// Parses NAME:MIN:OPT:MAX with 1 <= MIN <= OPT <= MAX and a non-empty name; each bound is
/// a sequence length N (batch 1) or BxS, batch and sequence each ordered so.
Result<SeqProfile> parse_seq_profile(std::string_view text);

/// Adds `name` (e.g. "--steps"), a whole number into `value`; the help shows it as N.
CLI::Option* add_int_option(CLI::App& app, const std::string& name, int64_t& value, const std::string& help);
/// The same, refusing a value outside [min, max] ("--seq: 0 is not in [1, ...]").
CLI::Option* add_int_option(CLI::App& app, const std::string& name, int64_t& value, const std::string& help,
                            int64_t min, int64_t max);
/// Adds `name`, a non-empty string into `value` ("--profile ''" is refused).
CLI::Option* add_name_option(CLI::App& app, const std::string& name, std::string& value, const std::string& help);
/// Adds `name`, a number ("0.7", "1e-3") into `value`.
CLI::Option* add_number_option(CLI::App& app, const std::string& name, double& value, const std::string& help);
/// Adds `name`, whole numbers separated by commas ("1,128,1") into `values`. The help shows
/// the values `values` holds now as the default.
CLI::Option* add_int_list_option(CLI::App& app, const std::string& name, std::vector<int64_t>& values,
                                 const std::string& help);
/// Adds `--profile NAME:MIN:OPT:MAX`, repeatable: each occurrence appends to `profiles`, in
/// command-line order.
CLI::Option* add_profile_option(CLI::App& app, std::vector<SeqProfile>& profiles, const std::string& help);

/// Prints `status` as one line "gearbox COMMAND: message" to stderr and returns `code`.
int fail(std::string_view command, const Status& status, int code = 1);

}  // namespace gearbox::cli
