// Small command-line helpers shared by the gearbox subcommands: strict number parsing and
// the `--profile NAME:MIN:OPT:MAX` syntax. Every parse error is a Status whose message
// names the flag and the bad value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/status.h"

namespace gearbox::cli {

/// A sequence-length profile from `--profile NAME:MIN:OPT:MAX`.
struct SeqProfile {
  std::string name;
  int64_t min = 0;
  int64_t opt = 0;
  int64_t max = 0;
};

/// Parses a whole decimal int64 ("12"; not "12x", "", " 1"). `flag` names it in errors.
Result<int64_t> parse_int(std::string_view text, std::string_view flag);
/// Parses "1,2,3" into integers.
Result<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view flag);
/// Parses NAME:MIN:OPT:MAX with 1 <= MIN <= OPT <= MAX and a non-empty name.
Result<SeqProfile> parse_seq_profile(std::string_view text);

}  // namespace gearbox::cli
