// How error messages quote a JSON value (config.json, tokenizer.json): scalars as written
// (strings cut at 40 characters), containers by kind, so a message stays one short line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gearbox::models {

inline std::string describe_json(const nlohmann::json& v) {
  if (v.is_string()) {
    std::string s = *v.get_ptr<const std::string*>();
    if (s.size() > 40) s = s.substr(0, 40) + "...";
    return "'" + s + "'";
  }
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return v.dump();  // number, bool or null: short and always valid UTF-8
}

}  // namespace gearbox::models
