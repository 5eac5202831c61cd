// Split patterns as regular expressions: PCRE2 in UTF + UCP mode, made to match as the
// Oniguruma regexes (Ruby syntax) of the `tokenizers` library do.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <new>

#include "tokenizer_json_internal.h"

namespace gearbox::cli::hf_json {
namespace {

// Unicode White_Space is PCRE2's \s (with UCP) plus U+0085, which Oniguruma's \s includes.
constexpr std::string_view kSpaceInClass = "\\s\\x{85}";

// `pattern` with \s and \S spelled for PCRE2; an error for an escape PCRE2 reads otherwise
// than Oniguruma does.
Result<std::string> translate(std::string_view pattern, const std::string& field) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  bool class_start = false;  // just after '[' or '[^', where ']' is a literal
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      class_start = false;
      if (e == 's') {
        out += in_class ? std::string(kSpaceInClass) : "[" + std::string(kSpaceInClass) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kSpaceInClass) + "]";
      } else if (std::string_view("SwWbBhHRXKgkGyYO").find(e) != kNpos) {
        return unimplemented("tokenizer.json: " + field + " uses \\" + std::string(1, e) +
                             (in_class ? " inside a character class" : "") +
                             ", which gearbox's regex engine (PCRE2) does not read as the tokenizers library does");
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (in_class) {
      if (const size_t close = pattern.find(":]", i);
          c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':' && close != kNpos) {
        out.append(pattern.substr(i, close + 2 - i));  // a POSIX class such as [:alpha:]
        i = close + 1;
        class_start = false;
        continue;
      }
      if (c == '[') {
        return unimplemented("tokenizer.json: " + field +
                             " nests a character class, which gearbox's regex engine (PCRE2) does not support");
      }
      if (c == ']' && !class_start) in_class = false;
      class_start = c == '^' && out.back() == '[';
    } else if (c == '[') {
      in_class = true;
      class_start = true;
    }
    out += c;
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<const Regex>> Regex::compile(std::string_view pattern, const std::string& field) {
  Result<std::string> translated = translate(pattern, field);
  if (!translated.ok()) return translated.status();
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  if (context == nullptr) return resource_exhausted("out of memory while compiling " + field);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated->data()), translated->size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NO_UTF_CHECK, &error, &offset, context);
  pcre2_compile_context_free(context);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    return unimplemented("tokenizer.json: " + field + " is not a regular expression gearbox can compile: " +
                         reinterpret_cast<const char*>(message.data()) + " (PCRE2, at offset " +
                         std::to_string(offset) + ")");
  }
  return std::shared_ptr<const Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_, nullptr);
  if (data == nullptr) throw std::bad_alloc();
  const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t from = 0;
  std::optional<size_t> last_match_end;
  while (from <= s.size()) {
    const int rc = pcre2_match(code_, subject, s.size(), from, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMEMORY) {
      pcre2_match_data_free(data);
      throw std::bad_alloc();
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // A match or depth limit: the split would differ from the library's, so it is an error.
      pcre2_match_data_free(data);
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      throw RegexMatchError(std::string("a pre-tokenizer regex failed on the text: ") +
                            reinterpret_cast<const char*>(message.data()) + " (PCRE2)");
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (start == end && last_match_end == end) {
      // An empty match where the previous one ended: step one character on.
      from += from < s.size() ? char_length(s, from) : 1;
      continue;
    }
    matches.emplace_back(start, end);
    from = end;
    last_match_end = end;
  }
  pcre2_match_data_free(data);
  return matches;
}

}  // namespace gearbox::cli::hf_json
