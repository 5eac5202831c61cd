#include "json_line.h"

#include <cstdio>
#include <cstdlib>

namespace gearbox::cli {

std::string json_line(const nlohmann::ordered_json& value) {
  if (value.is_object()) {
    std::string out = "{";
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (it != value.begin()) out += ", ";
      out += json_line(nlohmann::ordered_json(it.key())) + ": " + json_line(it.value());
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i > 0 ? ", " : "") + json_line(value[i]);
    return out + "]";
  }
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

double as_printed(double x, const char* format) {
  char text[64];
  std::snprintf(text, sizeof(text), format, x);
  return std::strtod(text, nullptr);
}

}  // namespace gearbox::cli
