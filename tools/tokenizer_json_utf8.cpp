// UTF-8 and string helpers of the tokenizer.json pipeline, and Unicode normalization.
#include <cstdlib>
#include <new>

#include <utf8proc.h>

#include "tokenizer_json_internal.h"

namespace gearbox::cli::hf_json {
namespace {

// The length of the UTF-8 sequence at s[i] when it is well formed (shortest form, no
// surrogates, at most U+10FFFF: what Rust and Python accept as text), else 0.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t n = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  const unsigned char second = byte(i + 1);
  if ((lead == 0xE0 && second < 0xA0) || (lead == 0xF0 && second < 0x90)) return 0;  // overlong
  if (lead == 0xED && second > 0x9F) return 0;                                       // surrogate
  if (lead == 0xF4 && second > 0x8F) return 0;                                       // past U+10FFFF
  return n;
}

// Unicode White_Space, what `\s` matches in the regex crate (added tokens' lstrip / rstrip).
bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

// The byte offset of the first ill-formed sequence in `s`, or kNpos.
size_t find_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return kNpos;
}

// The length of the character at s[i] of valid UTF-8.
size_t char_length(std::string_view s, size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// The code point of the character at s[i] of valid UTF-8.
uint32_t code_point(std::string_view s, size_t i) {
  const size_t n = char_length(s, i);
  const auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  if (n == 1) return byte(0);
  uint32_t c = byte(0) & (0xFFu >> (n + 1));
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (byte(k) & 0x3Fu);
  return c;
}

size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += char_length(s, i)) ++n;
  return n;
}

// Where the run of white space that ends at `end` begins.
size_t white_space_start(std::string_view s, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!is_white_space(code_point(s, start))) break;
    end = start;
  }
  return end;
}

// Where the run of white space that begins at `start` ends.
size_t white_space_end(std::string_view s, size_t start) {
  while (start < s.size() && is_white_space(code_point(s, start))) start += char_length(s, start);
  return start;
}

std::string nfc(std::string_view s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
  if (n < 0) {
    std::free(out);         // NOLINT(cppcoreguidelines-no-malloc): utf8proc allocates with malloc
    return std::string(s);  // not reached: the text is valid UTF-8
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);  // NOLINT(cppcoreguidelines-no-malloc)
  return result;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    if (const size_t n = utf8_sequence_length(bytes, i); n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
      continue;
    }
    // The maximal ill-formed part: a lead byte and the continuation bytes that may follow
    // it, up to the first that may not.
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
    const unsigned char lead = byte(i);
    size_t len = 1;
    size_t need = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      need = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      need = 2;
      low = lead == 0xE0 ? 0xA0 : 0x80;
      high = lead == 0xED ? 0x9F : 0xBF;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      need = 3;
      low = lead == 0xF0 ? 0x90 : 0x80;
      high = lead == 0xF4 ? 0x8F : 0xBF;
    }
    for (size_t k = 0; k < need && i + len < bytes.size(); ++k) {
      const unsigned char b = byte(i + len);
      if (b < (k == 0 ? low : 0x80) || b > (k == 0 ? high : 0xBF)) break;
      ++len;
    }
    out += "\xEF\xBF\xBD";  // U+FFFD
    i += len;
  }
  return out;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t prev = 0;
  for (size_t pos = s.find(from); pos != kNpos; pos = s.find(from, prev)) {
    out.append(s.substr(prev, pos - prev)).append(to);
    prev = pos + from.size();
  }
  out.append(s.substr(prev));
  return out;
}

}  // namespace gearbox::cli::hf_json
