// Ids to text: the decoders of tokenizer.json.
#include "tokenizer_json_internal.h"

namespace gearbox::cli {
namespace {

using hf_json::char_length;
using hf_json::DecoderKind;
using hf_json::DecoderStep;
using hf_json::find_invalid_utf8;
using hf_json::kNpos;
using hf_json::replace_all;

// decoders/byte_fallback.rs: "<0xNN>" is a byte (u8::from_str_radix takes a leading '+').
std::optional<unsigned char> byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = t[3] == '+' ? 0 : hex(t[3]);
  const int lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string bytes;
  const auto flush = [&] {
    if (bytes.empty()) return;
    if (find_invalid_utf8(bytes) == kNpos) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back("\xEF\xBF\xBD");  // U+FFFD per byte
    }
    bytes.clear();
  };
  for (std::string& t : tokens) {
    if (const auto b = byte_token(t)) {
      bytes.push_back(static_cast<char>(*b));
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

std::string strip(std::string_view token, std::string_view c, uint64_t start, uint64_t stop) {
  std::vector<std::string_view> chars;
  for (size_t i = 0; i < token.size(); i += char_length(token, i))
    chars.push_back(token.substr(i, char_length(token, i)));
  size_t start_cut = 0;
  for (size_t i = 0; i < chars.size() && i < start && chars[i] == c; ++i) start_cut = i + 1;
  size_t stop_cut = chars.size();
  for (size_t i = 0; i < chars.size() && i < stop && chars[chars.size() - i - 1] == c; ++i)
    stop_cut = chars.size() - i - 1;
  std::string out;
  for (size_t i = start_cut; i < stop_cut; ++i) out.append(chars[i]);
  return out;
}

}  // namespace

std::string HfTokenizer::Impl::decode(std::span<const int64_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int64_t id : ids) {
    const std::string* token = nullptr;
    if (const auto it = added_by_id.find(id); it != added_by_id.end()) {
      token = &added[it->second].decoded;
    } else if (const auto t = bpe.tokens.find(id); t != bpe.tokens.end()) {
      token = &t->second;
    }
    if (token != nullptr && special.count(*token) == 0) tokens.push_back(*token);
  }
  if (!has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i > 0 ? " " : "") + tokens[i];
    return out;
  }
  for (const DecoderStep& step : decoder) {
    switch (step.kind) {
      case DecoderKind::kReplace:
        for (std::string& t : tokens) t = replace_all(t, step.pattern, step.content);
        break;
      case DecoderKind::kByteFallback: tokens = byte_fallback(std::move(tokens)); break;
      case DecoderKind::kFuse: {
        std::string fused;
        for (const std::string& t : tokens) fused += t;
        tokens.clear();
        tokens.push_back(std::move(fused));
        break;
      }
      case DecoderKind::kStrip:
        for (std::string& t : tokens) t = strip(t, step.pattern, step.start, step.stop);
        break;
      case DecoderKind::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) hf_json::byte_level_to_bytes(t, bytes);
        tokens.clear();
        tokens.push_back(hf_json::utf8_lossy(bytes));
        break;
      }
      case DecoderKind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replace_all(tokens[i], step.pattern, i == 0 && step.drop_first ? "" : " ");
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace gearbox::cli
