// The ByteLevel pre-tokenizer and decoder of tokenizer.json: GPT-2's map of each byte to a
// printable character, so that BPE sees no white space or control characters.
#include "core/check.h"
#include "tokenizer_json_internal.h"

namespace gearbox::cli::hf_json {
namespace {

// The character (as a code point) that stands for each byte: the printable Latin-1 bytes
// stand for themselves, the others take U+0100, U+0101, ... in byte order.
std::array<uint32_t, 256> byte_characters() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = printable ? b : next++;
  }
  return map;
}

const std::array<uint32_t, 256> kByteCharacters = byte_characters();

// Each byte's character as UTF-8 (all are below U+0800: one or two bytes).
std::array<std::string, 256> byte_strings() {
  std::array<std::string, 256> out;
  for (size_t b = 0; b < 256; ++b) {
    const uint32_t c = kByteCharacters[b];
    if (c < 0x80) {
      out[b] = std::string(1, static_cast<char>(c));
    } else {
      out[b] = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    }
  }
  return out;
}

// Code point -> byte for the characters of the map; -1 for others. The map's characters
// are all below U+0144.
std::array<int, 0x144> character_bytes() {
  std::array<int, 0x144> out{};
  out.fill(-1);
  for (size_t b = 0; b < 256; ++b) out[kByteCharacters[b]] = static_cast<int>(b);
  return out;
}

}  // namespace

std::string bytes_to_byte_level(std::string_view s) {
  static const std::array<std::string, 256> kStrings = byte_strings();
  std::string out;
  out.reserve(s.size() * 2);
  for (const char c : s) out += kStrings[static_cast<unsigned char>(c)];
  return out;
}

void byte_level_to_bytes(std::string_view token, std::string& out) {
  static const std::array<int, 0x144> kBytes = character_bytes();
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size(); i += char_length(token, i)) {
    const uint32_t c = code_point(token, i);
    if (c >= kBytes.size() || kBytes[c] < 0) {
      out.append(token);  // a character outside the map: the token as it is
      return;
    }
    bytes.push_back(static_cast<char>(kBytes[c]));
  }
  out += bytes;
}

const std::shared_ptr<const Regex>& gpt2_regex() {
  static const std::shared_ptr<const Regex> kRegex = [] {
    Result<std::shared_ptr<const Regex>> r = Regex::compile(
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", "ByteLevel's regex");
    GEARBOX_CHECK(r.ok());
    return *r;
  }();
  return kRegex;
}

}  // namespace gearbox::cli::hf_json
