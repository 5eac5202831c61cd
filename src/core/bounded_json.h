// JSON parsing with bounded nesting, for every JSON file gearbox reads (config.json,
// tokenizer.json, network descriptions, safetensors headers and indexes, the tokenizer an
// engine carries). nlohmann's parser is iterative, but what walks the parsed value
// (the readers, dump, destruction) recurses: bounding the depth while parsing keeps a
// hostile file from overflowing the stack.
//
//   bool too_deep = false;
//   const nlohmann::json root = parse_json_bounded(text, too_deep);
//   if (too_deep) return data_loss(path + ": " + json_too_deep_message());
//   if (root.is_discarded()) return data_loss(path + " is not valid JSON");
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gearbox {

/// The deepest nesting of arrays and objects a JSON input may have.
inline constexpr int kMaxJsonDepth = 64;

/// Parses `text` (never throws on bad JSON: a discarded value is returned). Sets
/// `too_deep` (and returns a discarded value) when arrays and objects nest deeper than
/// kMaxJsonDepth. `inner`, when set, sees every event as in nlohmann's parser callback.
nlohmann::json parse_json_bounded(std::string_view text, bool& too_deep,
                                  const nlohmann::json::parser_callback_t& inner = nullptr);

/// "JSON nests deeper than 64 levels of arrays and objects".
std::string json_too_deep_message();

}  // namespace gearbox
