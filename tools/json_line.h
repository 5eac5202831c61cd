// The JSON the CLI prints and writes (`generate --json`, `score --json`, `bench --json`):
// values built as nlohmann::ordered_json (keys in insertion order), strings escaped and
// numbers written by nlohmann, laid out on one line with ", " and ": " between items:
//
//   nlohmann::ordered_json doc = {{"ids", {2, 17}}, {"ms", as_printed(ms, "%.3f")}};
//   std::puts(json_line(doc).c_str());  // {"ids": [2, 17], "ms": 1.234}
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace gearbox::cli {

/// `value` on one line. Strings that are not valid UTF-8 have their bad bytes replaced by
/// U+FFFD rather than failing.
std::string json_line(const nlohmann::ordered_json& value);

/// `x` rounded as printf `format` (one double conversion, e.g. "%.3f" or "%.9g") prints it,
/// so that the JSON number carries the digits the text output shows and no more.
double as_printed(double x, const char* format);

}  // namespace gearbox::cli
