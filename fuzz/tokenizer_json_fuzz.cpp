// Feeds arbitrary tokenizer.json documents and texts to the CLI's tokenizer. It must never
// read out of bounds, hit undefined behaviour or crash; what it accepts must encode any
// text to ids inside its vocabulary, and decode those ids (and arbitrary ones) without
// failing.
//
// Input: a u16 (little-endian) length N, N bytes of JSON, then the text. Seeds: the
// fixtures in tests/data/tokenizer with a short text appended.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "tokenizer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t json_bytes =
      std::min<size_t>(size - 2, static_cast<size_t>(data[0]) | (static_cast<size_t>(data[1]) << 8));
  const std::string_view json(reinterpret_cast<const char*>(data + 2), json_bytes);
  const std::string_view text(reinterpret_cast<const char*>(data + 2 + json_bytes), size - 2 - json_bytes);
  gearbox::Result<gearbox::cli::HfTokenizer> tok = gearbox::cli::HfTokenizer::from_json(json);
  if (!tok.ok()) return 0;
  const gearbox::Result<std::vector<int64_t>> ids = tok->encode(text);
  if (ids.ok()) {
    for (int64_t id : *ids) {
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    }
    if (!tok->decode(*ids).ok()) std::abort();
  }
  std::vector<int64_t> arbitrary;
  for (size_t i = 0; i + 1 < text.size() && arbitrary.size() < 64; i += 2) {
    arbitrary.push_back(static_cast<int64_t>(static_cast<uint8_t>(text[i])) << 8 | static_cast<uint8_t>(text[i + 1]));
  }
  arbitrary.push_back(-1);
  arbitrary.push_back(INT64_MAX);
  if (!tok->decode(arbitrary).ok()) std::abort();
  return 0;
}
