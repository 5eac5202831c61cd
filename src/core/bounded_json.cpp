#include "core/bounded_json.h"

namespace gearbox {

nlohmann::json parse_json_bounded(std::string_view text, bool& too_deep,
                                  const nlohmann::json::parser_callback_t& inner) {
  too_deep = false;
  // The callback's depth is that of the value being started; a start past the bound is
  // dropped (return false) so nothing deeper is built, and the flag turns the result into
  // an error.
  const nlohmann::json::parser_callback_t bound = [&](int depth, nlohmann::json::parse_event_t event,
                                                      nlohmann::json& parsed) {
    const bool starts =
        event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start;
    if (starts && depth >= kMaxJsonDepth) too_deep = true;
    if (too_deep) return false;
    return inner ? inner(depth, event, parsed) : true;
  };
  nlohmann::json root = nlohmann::json::parse(text.begin(), text.end(), bound, /*allow_exceptions=*/false);
  if (too_deep) return nlohmann::json(nlohmann::json::value_t::discarded);
  return root;
}

std::string json_too_deep_message() {
  return "JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels of arrays and objects";
}

}  // namespace gearbox
