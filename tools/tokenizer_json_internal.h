// The parts of HfTokenizer (tokenizer_json.h) that its source files share: the UTF-8
// helpers, the steps of the encode / decode pipeline as read from tokenizer.json, the BPE
// model, and HfTokenizer::Impl, which holds them. Not for use outside tokenizer_json*.cpp
// (bench/tokenizer_load_bench.cpp takes the ByteLevel characters from it).
//
//   tokenizer_json_read.cpp    tokenizer.json -> Impl (every field checked)
//   tokenizer_json_encode.cpp  text -> ids: added tokens, normalizer, pre-tokenizer
//   tokenizer_json_bpe.cpp     one pre-token -> ids: the BPE merges
//   tokenizer_json_decode.cpp  ids -> text: the decoders
//   tokenizer_json_utf8.cpp    UTF-8 and string helpers, the NFC normalizer (utf8proc)
//   tokenizer_json_regex.cpp   Split patterns as regular expressions (PCRE2)
//   tokenizer_json_byte_level.cpp  the ByteLevel pre-tokenizer's byte <-> character map
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gearbox/status.h"
#include "tokenizer_json.h"

struct pcre2_real_code_8;

namespace gearbox::cli::hf_json {

inline constexpr size_t kNpos = std::string_view::npos;

// ---- UTF-8 ---------------------------------------------------------------------------------

// The byte offset of the first ill-formed sequence in `s`, or kNpos.
size_t find_invalid_utf8(std::string_view s);
// The length of the character at s[i] of valid UTF-8.
size_t char_length(std::string_view s, size_t i);
// The code point of the character at s[i] of valid UTF-8.
uint32_t code_point(std::string_view s, size_t i);
size_t count_chars(std::string_view s);
// Where the run of white space that ends at `end` begins.
size_t white_space_start(std::string_view s, size_t end);
// Where the run of white space that begins at `start` ends.
size_t white_space_end(std::string_view s, size_t start);
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);
// Unicode NFC of valid UTF-8 (what the NFC normalizer does).
std::string nfc(std::string_view s);
// The bytes as UTF-8 text, each maximal ill-formed part replaced by one U+FFFD (what Rust's
// String::from_utf8_lossy does).
std::string utf8_lossy(std::string_view bytes);

// ---- regular expressions ------------------------------------------------------------------

// What Regex::find_all throws when PCRE2 gives up on a text (a match limit): encode turns it
// into an error rather than split the text otherwise than the library does.
class RegexMatchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A pattern of tokenizer.json ({"Regex": ...}), compiled with PCRE2 in UTF + UCP mode so that
// it matches as `tokenizers`' Oniguruma regexes do: `\s` and `\S` follow Unicode White_Space
// (PCRE2 leaves out U+0085), `^` and `$` match at line ends (Oniguruma's Ruby syntax). Escapes
// whose meaning differs between the two engines (`\h`, `\w`, `\b`...) are refused.
class Regex {
 public:
  /// Errors: kUnimplemented naming `field` for a pattern PCRE2 rejects or that uses an escape
  /// whose meaning differs in Oniguruma.
  static Result<std::shared_ptr<const Regex>> compile(std::string_view pattern, const std::string& field);
  // The matches in `s` (valid UTF-8) as Oniguruma's find_iter gives them: left to right, not
  // overlapping, an empty match only where the previous match did not end.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();

 private:
  explicit Regex(pcre2_real_code_8* code) : code_(code) {}
  pcre2_real_code_8* code_;
};

// ---- ByteLevel ----------------------------------------------------------------------------

// GPT-2's byte-to-character map: each byte of `s` as the character that stands for it.
std::string bytes_to_byte_level(std::string_view s);
// A token back to bytes: its characters' bytes when every one is in the map, else the token
// as it is (decoders/byte_level.rs).
void byte_level_to_bytes(std::string_view token, std::string& out);
// The pre-tokenizer regex of GPT-2 that ByteLevel applies with use_regex.
const std::shared_ptr<const Regex>& gpt2_regex();

// ---- the pipeline's parts -----------------------------------------------------------------

enum class PrependScheme { kAlways, kFirst, kNever };
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

enum class NormalizerKind { kReplace, kPrepend, kNfc };

struct NormalizerStep {
  NormalizerKind kind = NormalizerKind::kReplace;
  std::string pattern;  // Replace: what is replaced
  std::string content;  // Replace: what replaces it; Prepend: what is prepended to non-empty text
};

enum class PreTokenizerKind { kMetaspace, kSplit, kByteLevel };

struct PreTokenizerStep {
  PreTokenizerKind kind = PreTokenizerKind::kSplit;
  std::string pattern;                               // Metaspace: the replacement character; Split: a String delimiter
  std::shared_ptr<const Regex> regex;                // Split: a Regex delimiter; ByteLevel: GPT-2's, with use_regex
  PrependScheme prepend = PrependScheme::kAlways;    // Metaspace
  bool split = true;                                 // Metaspace
  SplitBehavior behavior = SplitBehavior::kRemoved;  // Split
  bool invert = false;                               // Split: the pieces between matches are the delimiters
  bool add_prefix_space = false;                     // ByteLevel: a space before each piece that lacks one
};

enum class DecoderKind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace, kByteLevel };

struct DecoderStep {
  DecoderKind kind = DecoderKind::kFuse;
  std::string pattern;      // Replace: the pattern; Strip: the character; Metaspace: the replacement
  std::string content;      // Replace: what replaces the pattern
  uint64_t start = 0;       // Strip: at most this many characters off the start
  uint64_t stop = 0;        // Strip: ... and off the end
  bool drop_first = false;  // Metaspace: the first token loses its replacement characters
};

struct AddedToken {
  std::string content;
  std::string decoded;  // what decode starts from: the normalized content when `normalized`
  int64_t id = 0;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// Leftmost-longest matching of a set of patterns, as the aho-corasick crate does it with
// MatchKind::LeftmostLongest: the match that starts first, the longest of those.
class Matcher {
 public:
  void add(std::string pattern, size_t token) {
    if (pattern.empty()) return;
    const auto first = static_cast<unsigned char>(pattern[0]);
    by_first_byte_[first].emplace_back(std::move(pattern), token);
  }
  void finish() {
    for (auto& bucket : by_first_byte_) {
      std::stable_sort(bucket.begin(), bucket.end(),
                       [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    }
  }
  // The first match at or after `from`: (start, end, token index).
  std::optional<std::tuple<size_t, size_t, size_t>> find(std::string_view s, size_t from) const {
    for (size_t pos = from; pos < s.size(); ++pos) {
      for (const auto& [pattern, token] : by_first_byte_[static_cast<unsigned char>(s[pos])]) {
        if (s.compare(pos, pattern.size(), pattern) == 0) return std::make_tuple(pos, pos + pattern.size(), token);
      }
    }
    return std::nullopt;
  }

 private:
  std::array<std::vector<std::pair<std::string, size_t>>, 256> by_first_byte_;
};

// Hashes std::string and std::string_view alike, so that a map keyed by std::string can be
// searched with a view (no string built per lookup).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Bpe {
  struct Merge {
    uint32_t rank = 0;
    int64_t id = 0;  // the merged token
  };
  std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> vocab;
  std::unordered_map<int64_t, std::string> tokens;
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id) -> merge
  std::array<int64_t, 256> byte_ids{};         // <0xNN>, or -1
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;

  static uint64_t pair_key(int64_t left, int64_t right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(right);
  }
  const Merge* find_merge(int64_t left, int64_t right) const {
    const auto it = merges.find(pair_key(left, right));
    return it == merges.end() ? nullptr : &it->second;
  }

  Status tokenize(std::string_view word, std::vector<int64_t>& out) const;
};

// A stretch of the text on its way through the pipeline.
struct Piece {
  std::string text;
  int64_t token = -1;     // an added token's id; -1: text still to tokenize
  bool at_start = false;  // begins at the start of the input (Metaspace prepend_scheme "first")
};

}  // namespace gearbox::cli::hf_json

namespace gearbox::cli {

struct HfTokenizer::Impl {
  std::vector<hf_json::NormalizerStep> normalizer;
  std::vector<hf_json::PreTokenizerStep> pre_tokenizer;
  bool has_decoder = false;
  std::vector<hf_json::DecoderStep> decoder;
  hf_json::Bpe bpe;
  std::vector<hf_json::AddedToken> added;
  std::unordered_map<std::string, size_t> added_by_content;
  std::unordered_map<int64_t, size_t> added_by_id;
  std::unordered_set<std::string> special;  // contents of special added tokens
  hf_json::Matcher raw_matcher;             // added tokens with normalized: false, on the raw text
  hf_json::Matcher normalized_matcher;      // normalized: true, their normalized form on the normalized text
  int64_t vocab_size = 0;
  int64_t bos_id = -1;  // the token the post_processor's template puts before the text, or -1

  std::string normalize(std::string text) const;
  void split_added(const hf_json::Matcher& matcher, std::vector<hf_json::Piece>& pieces) const;
  void pre_tokenize(const hf_json::PreTokenizerStep& step, std::vector<hf_json::Piece>& pieces) const;
  Result<std::vector<int64_t>> encode(std::string_view text) const;
  std::string decode(std::span<const int64_t> ids) const;
};

namespace hf_json {

/// Reads a tokenizer.json into `t`: kDataLoss for malformed input, kUnimplemented naming
/// the field for what gearbox does not implement (tokenizer_json.h lists what it does).
Status read_tokenizer(std::string_view json_text, HfTokenizer::Impl& t);

}  // namespace hf_json
}  // namespace gearbox::cli
