// HfTokenizer: reading tokenizer.json, and its encode / decode pipeline. Each step follows
// the `tokenizers` library (Rust) closely, corner cases included, because that library is
// the reference the tests compare against (tests/data/tokenizer/cases.json).
#include "tokenizer_json.h"

#include <algorithm>
#include <array>
#include <exception>
#include <initializer_list>
#include <limits>
#include <new>
#include <optional>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "models/json_describe.h"

namespace gearbox::cli {
namespace {

using Json = nlohmann::json;
constexpr size_t kNpos = std::string_view::npos;

// ---- UTF-8 ---------------------------------------------------------------------------------

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

// Unicode White_Space, what `\s` matches in the regex crate (added tokens' lstrip / rstrip).
bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
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

// ---- the pipeline's parts -----------------------------------------------------------------

enum class PrependScheme { kAlways, kFirst, kNever };
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct NormalizerStep {
  bool prepend = false;  // Prepend `content` to non-empty text; else Replace `pattern` with `content`
  std::string pattern;
  std::string content;
};

struct PreTokenizerStep {
  bool metaspace = false;                            // Metaspace, else Split
  std::string pattern;                               // Metaspace: the replacement character; Split: the delimiter
  PrependScheme prepend = PrependScheme::kAlways;    // Metaspace
  bool split = true;                                 // Metaspace
  SplitBehavior behavior = SplitBehavior::kRemoved;  // Split
};

enum class DecoderKind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace };

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

struct Bpe {
  struct Merge {
    uint32_t rank = 0;
    int64_t id = 0;  // the merged token
  };
  std::unordered_map<std::string, int64_t> vocab;
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

}  // namespace

struct HfTokenizer::Impl {
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  bool has_decoder = false;
  std::vector<DecoderStep> decoder;
  Bpe bpe;
  std::vector<AddedToken> added;
  std::unordered_map<std::string, size_t> added_by_content;
  std::unordered_map<int64_t, size_t> added_by_id;
  std::unordered_set<std::string> special;  // contents of special added tokens
  Matcher raw_matcher;                      // added tokens with normalized: false, on the raw text
  Matcher normalized_matcher;               // normalized: true, their normalized form on the normalized text
  int64_t vocab_size = 0;

  std::string normalize(std::string text) const;
  void split_added(const Matcher& matcher, std::vector<Piece>& pieces) const;
  void pre_tokenize(const PreTokenizerStep& step, std::vector<Piece>& pieces) const;
  Result<std::vector<int64_t>> encode(std::string_view text) const;
  std::string decode(std::span<const int64_t> ids) const;
};

namespace {

// ---- BPE ------------------------------------------------------------------------------------

// `tokenizers`' BPE::tokenize (models/bpe/model.rs) for one pre-token: characters, byte
// fallback or unk for those outside the vocabulary, then merges by rank (word.rs merge_all).
Status Bpe::tokenize(std::string_view word, std::vector<int64_t>& out) const {
  if (word.empty()) return {};
  if (ignore_merges) {
    if (const auto it = vocab.find(std::string(word)); it != vocab.end()) {
      out.push_back(it->second);
      return {};
    }
  }
  struct Symbol {
    int64_t id;
    int64_t prev;
    int64_t next;
    size_t len;  // bytes; 0 once merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](int64_t id, size_t len) {
    const auto n = static_cast<int64_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = n;
    symbols.push_back({id, symbols.empty() ? -1 : n - 1, -1, len});
  };
  // A pending run of unknown characters: its unk id and bytes (unk_bytes == 0: none). Plain
  // variables, not an optional pair, which GCC 12 misreads as maybe-uninitialized at -O2.
  int64_t unk_id = -1;
  size_t unk_bytes = 0;
  for (size_t i = 0; i < word.size();) {
    const size_t len = char_length(word, i);
    const std::string c(word.substr(i, len));
    i += len;
    if (const auto it = vocab.find(c); it != vocab.end()) {
      if (unk_bytes > 0) add(unk_id, unk_bytes);
      unk_bytes = 0;
      add(it->second, len);
      continue;
    }
    if (byte_fallback &&
        std::all_of(c.begin(), c.end(), [&](char b) { return byte_ids[static_cast<unsigned char>(b)] >= 0; })) {
      for (const char b : c) add(byte_ids[static_cast<unsigned char>(b)], 1);
      continue;  // (like `tokenizers`, without flushing a pending unk first)
    }
    if (!unk_token) continue;  // no unk token: `tokenizers` drops the character
    const auto unk_it = vocab.find(*unk_token);
    if (unk_it == vocab.end()) {
      return invalid_argument("the text has a character outside the tokenizer's vocabulary, and its unk_token '" +
                              *unk_token + "' is not in the vocabulary either");
    }
    if (unk_bytes > 0 && fuse_unk) {
      unk_bytes += len;
    } else {
      if (unk_bytes > 0) add(unk_id, unk_bytes);
      unk_id = unk_it->second;
      unk_bytes = len;
    }
  }
  if (unk_bytes > 0) add(unk_id, unk_bytes);

  struct Candidate {
    uint32_t rank;
    size_t pos;
    int64_t id;
  };
  // A min-heap on (rank, pos).
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = find_merge(symbols[i].id, symbols[i + 1].id)) queue.push({m->rank, i, m->id});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    const auto next_pos = static_cast<size_t>(left.next);
    const Symbol right = symbols[next_pos];
    const Merge* current = find_merge(left.id, right.id);
    if (current == nullptr || current->id != top.id) continue;  // an outdated candidate
    left.id = top.id;
    left.len += right.len;
    left.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size()) {
      symbols[static_cast<size_t>(right.next)].prev = static_cast<int64_t>(top.pos);
    }
    if (left.prev >= 0) {
      const auto prev = static_cast<size_t>(left.prev);
      if (const Merge* m = find_merge(symbols[prev].id, left.id)) queue.push({m->rank, prev, m->id});
    }
    if (left.next >= 0 && static_cast<size_t>(left.next) < symbols.size()) {
      if (const Merge* m = find_merge(left.id, symbols[static_cast<size_t>(left.next)].id)) {
        queue.push({m->rank, top.pos, m->id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
  return {};
}

// ---- splitting --------------------------------------------------------------------------

// NormalizedString::split with a literal pattern: the [start, end) ranges of the pieces.
std::vector<std::pair<size_t, size_t>> split_ranges(std::string_view s, std::string_view delimiter,
                                                    SplitBehavior behavior) {
  struct Part {
    size_t start;
    size_t end;
    bool match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  if (!delimiter.empty()) {
    for (size_t pos = s.find(delimiter); pos != kNpos; pos = s.find(delimiter, prev)) {
      if (pos != prev) parts.push_back({prev, pos, false});
      parts.push_back({pos, pos + delimiter.size(), true});
      prev = pos + delimiter.size();
    }
  }
  if (prev != s.size()) parts.push_back({prev, s.size(), false});

  std::vector<std::pair<size_t, size_t>> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.match) out.emplace_back(p.start, p.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Part& p : parts) out.emplace_back(p.start, p.end);
      break;
    case SplitBehavior::kContiguous:
      for (const Part& p : parts) {
        if (p.match == previous_match && !out.empty()) {
          out.back().second = p.end;
        } else {
          out.emplace_back(p.start, p.end);
        }
        previous_match = p.match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.match && !previous_match && !out.empty()) {
          out.back().second = p.end;
        } else {
          out.emplace_back(p.start, p.end);
        }
        previous_match = p.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t i = parts.size(); i-- > 0;) {
        const Part& p = parts[i];
        if (p.match && !previous_match && !out.empty()) {
          out.back().first = p.start;
        } else {
          out.emplace_back(p.start, p.end);
        }
        previous_match = p.match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

}  // namespace

std::string HfTokenizer::Impl::normalize(std::string text) const {
  for (const NormalizerStep& step : normalizer) {
    if (step.prepend) {
      if (!text.empty()) text = step.content + text;
    } else {
      text = replace_all(text, step.pattern, step.content);
    }
  }
  return text;
}

// AddedVocabulary::find_matches + split_with_indices: each piece of text becomes the
// added tokens found in it (with the white space lstrip / rstrip take) and the text between.
void HfTokenizer::Impl::split_added(const Matcher& matcher, std::vector<Piece>& pieces) const {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& piece : pieces) {
    if (piece.token >= 0) {
      out.push_back(std::move(piece));
      continue;
    }
    const std::string_view s = piece.text;
    size_t start_offset = 0;
    const auto text = [&](size_t a, size_t b) {
      if (b > a) out.push_back({std::string(s.substr(a, b - a)), -1, piece.at_start && a == 0});
    };
    for (auto match = matcher.find(s, 0); match; match = matcher.find(s, std::get<1>(*match))) {
      const auto [match_start, match_end, index] = *match;
      const AddedToken& token = added[index];
      size_t start = match_start;
      size_t stop = match_end;
      if (token.lstrip) start = std::max(white_space_start(s, start), start_offset);
      if (token.rstrip) stop = white_space_end(s, stop);
      text(start_offset, start);
      out.push_back({std::string(s.substr(start, stop - start)), token.id, false});
      start_offset = stop;
    }
    text(start_offset, s.size());
  }
  pieces = std::move(out);
}

void HfTokenizer::Impl::pre_tokenize(const PreTokenizerStep& step, std::vector<Piece>& pieces) const {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& piece : pieces) {
    if (piece.token >= 0) {
      out.push_back(std::move(piece));
      continue;
    }
    std::string text;
    SplitBehavior behavior = step.behavior;
    if (step.metaspace) {
      text = replace_all(piece.text, " ", step.pattern);
      const bool prepend =
          step.prepend == PrependScheme::kAlways || (step.prepend == PrependScheme::kFirst && piece.at_start);
      if (prepend && text.compare(0, step.pattern.size(), step.pattern) != 0) text = step.pattern + text;
      if (!step.split) {
        out.push_back({std::move(text), -1, piece.at_start});
        continue;
      }
      behavior = SplitBehavior::kMergedWithNext;
    } else {
      text = std::move(piece.text);
    }
    for (const auto& [a, b] : split_ranges(text, step.pattern, behavior)) {
      if (b > a) out.push_back({text.substr(a, b - a), -1, piece.at_start && a == 0});
    }
  }
  pieces = std::move(out);
}

Result<std::vector<int64_t>> HfTokenizer::Impl::encode(std::string_view text) const {
  std::vector<Piece> pieces;
  if (!text.empty()) pieces.push_back({std::string(text), -1, true});
  // 1. Added tokens that match the raw text; 2. the normalizer on the rest, and added tokens
  // that match its normalized form (AddedVocabulary::extract_and_normalize).
  split_added(raw_matcher, pieces);
  for (Piece& piece : pieces) {
    if (piece.token < 0) piece.text = normalize(std::move(piece.text));
  }
  std::erase_if(pieces, [](const Piece& p) { return p.token < 0 && p.text.empty(); });
  split_added(normalized_matcher, pieces);
  // 3. The pre-tokenizer; 4. the model on each pre-token.
  for (const PreTokenizerStep& step : pre_tokenizer) pre_tokenize(step, pieces);
  std::vector<int64_t> ids;
  for (const Piece& piece : pieces) {
    if (piece.token >= 0) {
      ids.push_back(piece.token);
    } else {
      GEARBOX_RETURN_IF_ERROR(bpe.tokenize(piece.text, ids));
    }
  }
  return ids;
}

namespace {

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

// ---- reading tokenizer.json ---------------------------------------------------------------

namespace {

using models::describe_json;

Status malformed(const std::string& field, const std::string& what) {
  return data_loss("tokenizer.json: " + field + " " + what);
}

Status unsupported(const std::string& field, const std::string& value, const std::string& hint) {
  return unimplemented("tokenizer.json: " + field + " " + value + " is not supported" +
                       (hint.empty() ? "" : " (" + hint + ")"));
}

// One JSON object of the file and where it is ("normalizer.normalizers[1]"), for messages.
class Node {
 public:
  Node(const Json& json, std::string path) : json_(json), path_(std::move(path)) {}

  std::string field(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  const std::string& path() const { return path_; }

  // An object whose keys are all in `known`: any other field is one this reader does not
  // implement, and is reported rather than ignored.
  Status expect_object(std::initializer_list<std::string_view> known) const {
    if (!json_.is_object()) return malformed(path_, "must be an object, got " + describe_json(json_));
    for (const auto& [key, value] : json_.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        return unimplemented("tokenizer.json: the field " + field(key) +
                             " is not supported (gearbox does not implement it)");
      }
    }
    return {};
  }
  // The value of `key`, or null when absent or null.
  const Json* find(std::string_view key) const {
    const auto it = json_.find(key);
    return it == json_.end() || it->is_null() ? nullptr : &*it;
  }
  Result<std::string> string(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) return malformed(field(key), "is missing");
    if (!v->is_string()) return malformed(field(key), "must be a string, got " + describe_json(*v));
    return *v->get_ptr<const std::string*>();
  }
  // A string of exactly one character (Metaspace's replacement, Strip's content).
  Result<std::string> character(std::string_view key) const {
    Result<std::string> s = string(key);
    if (!s.ok()) return s;
    if (s->empty() || count_chars(*s) != 1) return malformed(field(key), "must be one character, got '" + *s + "'");
    return s;
  }
  Status boolean(std::string_view key, bool& out) const {
    const Json* v = find(key);
    if (v == nullptr) return {};
    if (!v->is_boolean()) return malformed(field(key), "must be true or false, got " + describe_json(*v));
    out = v->get<bool>();
    return {};
  }
  Status unsigned_integer(std::string_view key, uint64_t& out) const {
    const Json* v = find(key);
    if (v == nullptr) return malformed(field(key), "is missing");
    if (!v->is_number_unsigned()) return malformed(field(key), "must be a whole number >= 0, got " + describe_json(*v));
    out = v->get<uint64_t>();
    return {};
  }
  // {"String": s} ({"Regex": r} is not implemented).
  Result<std::string> string_pattern(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) return malformed(field(key), "is missing");
    const Node pattern(*v, field(key));
    if (v->is_object() && v->size() == 1 && v->contains("Regex")) {
      return unsupported(pattern.field("Regex"), "(a regular expression)", "only String patterns are implemented");
    }
    GEARBOX_RETURN_IF_ERROR(pattern.expect_object({"String"}));
    return pattern.string("String");
  }
  Result<std::string> type() const {
    if (!json_.is_object()) return malformed(path_, "must be an object, got " + describe_json(json_));
    return string("type");
  }

 private:
  const Json& json_;
  std::string path_;
};

constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();

Status read_id(const Json& v, const std::string& field, int64_t& out) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(kMaxId)) {
    return malformed(field, "must be a token id in [0, 2^31), got " + describe_json(v));
  }
  out = static_cast<int64_t>(v.get<uint64_t>());
  return {};
}

Result<PrependScheme> read_prepend_scheme(const Node& node) {
  // prepend_scheme, or (files before tokenizers 0.19) add_prefix_space: false means never.
  PrependScheme scheme = PrependScheme::kAlways;
  const Json* v = node.find("prepend_scheme");
  if (v != nullptr) {
    if (!v->is_string()) return malformed(node.field("prepend_scheme"), "must be a string, got " + describe_json(*v));
    const std::string& s = *v->get_ptr<const std::string*>();
    if (s == "always") {
      scheme = PrependScheme::kAlways;
    } else if (s == "first") {
      scheme = PrependScheme::kFirst;
    } else if (s == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return unsupported(node.field("prepend_scheme"), describe_json(*v), "known: always, first, never");
    }
  }
  bool add_prefix_space = true;
  GEARBOX_RETURN_IF_ERROR(node.boolean("add_prefix_space", add_prefix_space));
  if (!add_prefix_space) {
    if (v != nullptr && scheme != PrependScheme::kNever) {
      return malformed(node.field("add_prefix_space"), "false contradicts prepend_scheme " + describe_json(*v));
    }
    scheme = PrependScheme::kNever;
  }
  return scheme;
}

// A Metaspace's replacement; str_rep (older files) must repeat it.
Result<std::string> read_replacement(const Node& node) {
  Result<std::string> replacement = node.character("replacement");
  if (!replacement.ok()) return replacement;
  if (node.find("str_rep") != nullptr) {
    Result<std::string> rep = node.string("str_rep");
    if (!rep.ok()) return rep.status();
    if (*rep != *replacement) {
      return unsupported(node.field("str_rep"), "'" + *rep + "'",
                         "it must equal the replacement '" + *replacement + "'");
    }
  }
  return replacement;
}

// A "Sequence" step: reads each entry of the list under `key` with `read`, in order.
template <typename Step>
Status read_sequence(const Node& node, const char* key, Status (*read)(const Node&, std::vector<Step>&),
                     std::vector<Step>& steps) {
  GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", key}));
  const Json* list = node.find(key);
  if (list == nullptr || !list->is_array()) return malformed(node.field(key), "must be a list");
  for (size_t i = 0; i < list->size(); ++i) {
    GEARBOX_RETURN_IF_ERROR(read(Node((*list)[i], node.field(key) + "[" + std::to_string(i) + "]"), steps));
  }
  return {};
}

/// A "Metaspace" step (pre-tokenizer or decoder): its replacement, prepend scheme and split.
Status read_metaspace(const Node& node, std::string& replacement, PrependScheme& scheme, bool& split) {
  GEARBOX_RETURN_IF_ERROR(
      node.expect_object({"type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"}));
  Result<std::string> r = read_replacement(node);
  if (!r.ok()) return r.status();
  Result<PrependScheme> s = read_prepend_scheme(node);
  if (!s.ok()) return s.status();
  GEARBOX_RETURN_IF_ERROR(node.boolean("split", split));
  replacement = std::move(*r);
  scheme = *s;
  return {};
}

/// A "Replace" step (normalizer or decoder): a non-empty string pattern and its replacement.
Status read_replace(const Node& node, std::string& pattern, std::string& content) {
  GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "pattern", "content"}));
  Result<std::string> p = node.string_pattern("pattern");
  if (!p.ok()) return p.status();
  if (p->empty()) return unsupported(node.field("pattern.String"), "''", "an empty pattern");
  Result<std::string> c = node.string("content");
  if (!c.ok()) return c.status();
  pattern = std::move(*p);
  content = std::move(*c);
  return {};
}

Status read_normalizer(const Node& node, std::vector<NormalizerStep>& steps) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type == "Sequence") return read_sequence(node, "normalizers", &read_normalizer, steps);
  NormalizerStep step;
  if (*type == "Replace") {
    GEARBOX_RETURN_IF_ERROR(read_replace(node, step.pattern, step.content));
  } else if (*type == "Prepend") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "prepend"}));
    Result<std::string> prepend = node.string("prepend");
    if (!prepend.ok()) return prepend.status();
    step.prepend = true;
    step.content = std::move(*prepend);
  } else {
    return unsupported(node.field("type"), "'" + *type + "'",
                       "gearbox implements the normalizers Sequence, Replace and Prepend");
  }
  steps.push_back(std::move(step));
  return {};
}

Status read_pre_tokenizer(const Node& node, std::vector<PreTokenizerStep>& steps) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type == "Sequence") return read_sequence(node, "pretokenizers", &read_pre_tokenizer, steps);
  PreTokenizerStep step;
  if (*type == "Metaspace") {
    GEARBOX_RETURN_IF_ERROR(read_metaspace(node, step.pattern, step.prepend, step.split));
    step.metaspace = true;
  } else if (*type == "Split") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "pattern", "behavior", "invert"}));
    Result<std::string> pattern = node.string_pattern("pattern");
    if (!pattern.ok()) return pattern.status();
    Result<std::string> behavior = node.string("behavior");
    if (!behavior.ok()) return behavior.status();
    static const std::pair<std::string_view, SplitBehavior> kBehaviors[] = {
        {"Removed", SplitBehavior::kRemoved},
        {"Isolated", SplitBehavior::kIsolated},
        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
        {"MergedWithNext", SplitBehavior::kMergedWithNext},
        {"Contiguous", SplitBehavior::kContiguous}};
    const auto* known =
        std::find_if(std::begin(kBehaviors), std::end(kBehaviors), [&](const auto& b) { return b.first == *behavior; });
    if (known == std::end(kBehaviors)) {
      return unsupported(node.field("behavior"), "'" + *behavior + "'",
                         "known: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    }
    bool invert = false;
    GEARBOX_RETURN_IF_ERROR(node.boolean("invert", invert));
    if (invert) return unsupported(node.field("invert"), "true", "only invert: false is implemented");
    step.pattern = std::move(*pattern);
    step.behavior = known->second;
  } else {
    return unsupported(node.field("type"), "'" + *type + "'",
                       "gearbox implements the pre-tokenizers Sequence, Metaspace and Split");
  }
  steps.push_back(std::move(step));
  return {};
}

Status read_decoder(const Node& node, std::vector<DecoderStep>& steps) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type == "Sequence") return read_sequence(node, "decoders", &read_decoder, steps);
  DecoderStep step;
  if (*type == "Replace") {
    GEARBOX_RETURN_IF_ERROR(read_replace(node, step.pattern, step.content));
    step.kind = DecoderKind::kReplace;
  } else if (*type == "ByteFallback") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type"}));
    step.kind = DecoderKind::kByteFallback;
  } else if (*type == "Fuse") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type"}));
    step.kind = DecoderKind::kFuse;
  } else if (*type == "Strip") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "content", "start", "stop"}));
    Result<std::string> content = node.character("content");
    if (!content.ok()) return content.status();
    step.kind = DecoderKind::kStrip;
    step.pattern = std::move(*content);
    GEARBOX_RETURN_IF_ERROR(node.unsigned_integer("start", step.start));
    GEARBOX_RETURN_IF_ERROR(node.unsigned_integer("stop", step.stop));
  } else if (*type == "Metaspace") {
    PrependScheme scheme = PrependScheme::kAlways;
    bool split = true;  // decoding does not depend on it
    GEARBOX_RETURN_IF_ERROR(read_metaspace(node, step.pattern, scheme, split));
    step.kind = DecoderKind::kMetaspace;
    step.drop_first = scheme != PrependScheme::kNever;
  } else {
    return unsupported(node.field("type"), "'" + *type + "'",
                       "gearbox implements the decoders Sequence, Replace, ByteFallback, Fuse, Strip and Metaspace");
  }
  steps.push_back(std::move(step));
  return {};
}

// The post-processor adds special tokens around a sequence; gearbox's callers add the BOS
// themselves (`gearbox generate` from "tokenizer.bos"), so only the templates that add
// nothing else are accepted.
Status read_post_processor(const Node& node) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type != "TemplateProcessing") {
    return unsupported(node.field("type"), "'" + *type + "'", "gearbox implements TemplateProcessing with [BOS] $A");
  }
  GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "single", "pair", "special_tokens"}));
  const Json* single = node.find("single");
  if (single == nullptr || !single->is_array()) return malformed(node.field("single"), "must be a list");
  const auto is_sequence_a = [](const Json& piece) {
    return piece.is_object() && piece.contains("Sequence") && piece["Sequence"].is_object() &&
           piece["Sequence"].value("id", "") == "A";
  };
  const bool ok = (single->size() == 1 && is_sequence_a((*single)[0])) ||
                  (single->size() == 2 && (*single)[0].is_object() && (*single)[0].contains("SpecialToken") &&
                   is_sequence_a((*single)[1]));
  if (!ok) {
    return unsupported(node.field("single"), single->dump(),
                       "gearbox adds the BOS itself: only the templates [BOS] $A and $A are implemented");
  }
  return {};
}

Status read_model(const Node& node, Bpe& bpe) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type != "BPE") {
    return unsupported(node.field("type"), "'" + *type + "'",
                       "gearbox implements BPE, the model of Gemma, Llama-2 and Mistral tokenizers");
  }
  GEARBOX_RETURN_IF_ERROR(
      node.expect_object({"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                          "byte_fallback", "ignore_merges", "vocab", "merges"}));
  if (const Json* dropout = node.find("dropout"); dropout != nullptr) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      return unsupported(node.field("dropout"), describe_json(*dropout), "only null: encoding must be deterministic");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Json* v = node.find(key); v != nullptr && !(v->is_string() && v->get_ref<const std::string&>().empty())) {
      return unsupported(node.field(key), describe_json(*v), "only null is implemented");
    }
  }
  if (node.find("unk_token") != nullptr) {
    Result<std::string> unk = node.string("unk_token");
    if (!unk.ok()) return unk.status();
    bpe.unk_token = std::move(*unk);
  }
  GEARBOX_RETURN_IF_ERROR(node.boolean("fuse_unk", bpe.fuse_unk));
  GEARBOX_RETURN_IF_ERROR(node.boolean("byte_fallback", bpe.byte_fallback));
  GEARBOX_RETURN_IF_ERROR(node.boolean("ignore_merges", bpe.ignore_merges));

  const Json* vocab = node.find("vocab");
  if (vocab == nullptr || !vocab->is_object()) return malformed(node.field("vocab"), "must be an object {token: id}");
  bpe.vocab.reserve(vocab->size());
  bpe.tokens.reserve(vocab->size());
  for (const auto& [token, value] : vocab->items()) {
    int64_t id = 0;
    GEARBOX_RETURN_IF_ERROR(read_id(value, node.field("vocab") + "['" + token + "']", id));
    if (const auto [it, inserted] = bpe.tokens.emplace(id, token); !inserted) {
      return malformed(node.field("vocab"),
                       "gives the id " + std::to_string(id) + " to both '" + it->second + "' and '" + token + "'");
    }
    bpe.vocab.emplace(token, id);
  }
  for (size_t b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
    const auto it = bpe.vocab.find(name);
    bpe.byte_ids[b] = it == bpe.vocab.end() ? -1 : it->second;
  }

  const Json* merges = node.find("merges");
  if (merges == nullptr || !merges->is_array()) return malformed(node.field("merges"), "must be a list");
  const size_t count = merges->size();
  if (count > std::numeric_limits<uint32_t>::max()) return malformed(node.field("merges"), "has too many entries");
  bpe.merges.reserve(count);
  for (size_t rank = 0; rank < count; ++rank) {
    const Json& m = (*merges)[rank];
    const std::string field = node.field("merges") + "[" + std::to_string(rank) + "]";
    std::string left;
    std::string right;
    if (m.is_string()) {  // "left right"
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == kNpos) return malformed(field, "must be two tokens separated by a space, got " + describe_json(m));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return malformed(field, "must be \"left right\" or [\"left\", \"right\"], got " + describe_json(m));
    }
    const auto l = bpe.vocab.find(left);
    const auto r = bpe.vocab.find(right);
    const auto merged = bpe.vocab.find(left + right);
    for (const auto& [it, token] : {std::pair(l, left), std::pair(r, right), std::pair(merged, left + right)}) {
      if (it == bpe.vocab.end()) return malformed(field, "names '" + token + "', which is not in model.vocab");
    }
    // Later entries replace earlier ones, as in `tokenizers` (a HashMap collected in order).
    bpe.merges[Bpe::pair_key(l->second, r->second)] = {static_cast<uint32_t>(rank), merged->second};
  }
  return {};
}

Status read_added_tokens(const Json* list, HfTokenizer::Impl& t) {
  if (list == nullptr) return {};
  if (!list->is_array()) return malformed("added_tokens", "must be a list");
  // The ids `tokenizers` gives (AddedVocabulary::add_tokens): the vocabulary's own for a
  // token in it, else the next one after the model's. A file that says otherwise would
  // tokenize differently there than it claims, so it is refused.
  const auto model_size = static_cast<int64_t>(t.bpe.vocab.size());
  int64_t max_added = -1;
  for (size_t i = 0; i < list->size(); ++i) {
    const Node node((*list)[i], "added_tokens[" + std::to_string(i) + "]");
    GEARBOX_RETURN_IF_ERROR(
        node.expect_object({"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}));
    AddedToken token;
    Result<std::string> content = node.string("content");
    if (!content.ok()) return content.status();
    token.content = std::move(*content);
    const Json* id = node.find("id");
    if (id == nullptr) return malformed(node.field("id"), "is missing");
    GEARBOX_RETURN_IF_ERROR(read_id(*id, node.field("id"), token.id));
    bool single_word = false;
    GEARBOX_RETURN_IF_ERROR(node.boolean("single_word", single_word));
    if (single_word) return unsupported(node.field("single_word"), "true", "tokens matched only as whole words");
    GEARBOX_RETURN_IF_ERROR(node.boolean("lstrip", token.lstrip));
    GEARBOX_RETURN_IF_ERROR(node.boolean("rstrip", token.rstrip));
    GEARBOX_RETURN_IF_ERROR(node.boolean("special", token.special));
    token.normalized = !token.special;  // the default, as in AddedToken::from
    GEARBOX_RETURN_IF_ERROR(node.boolean("normalized", token.normalized));
    if (token.content.empty()) continue;  // `tokenizers` ignores these too: they cannot match
    if (t.added_by_content.count(token.content) != 0) {
      return malformed(node.path(), "repeats the added token '" + token.content + "'");
    }
    int64_t expected = 0;
    if (const auto it = t.bpe.vocab.find(token.content); it != t.bpe.vocab.end()) {
      expected = it->second;
    } else {
      expected = max_added < 0 ? model_size : (max_added >= model_size || model_size == 0 ? max_added + 1 : model_size);
    }
    if (token.id != expected) {
      return malformed(node.path(), "gives '" + token.content + "' the id " + std::to_string(token.id) +
                                        ", but the tokenizers library would give it " + std::to_string(expected) +
                                        " (the vocabulary's id, or the next id after the model's)");
    }
    max_added = std::max(max_added, token.id);
    if (t.added_by_id.count(token.id) != 0) return malformed(node.path(), "repeats the id " + std::to_string(token.id));
    t.added_by_content.emplace(token.content, t.added.size());
    t.added_by_id.emplace(token.id, t.added.size());
    if (token.special) t.special.insert(token.content);
    t.added.push_back(std::move(token));
  }
  return {};
}

Status read_tokenizer(std::string_view json_text, HfTokenizer::Impl& t) {
  const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return data_loss("tokenizer.json is not valid JSON");
  const Node top(root, "");
  GEARBOX_RETURN_IF_ERROR(top.expect_object({"version", "truncation", "padding", "added_tokens", "normalizer",
                                             "pre_tokenizer", "post_processor", "decoder", "model"}));
  if (const Json* version = top.find("version"); version != nullptr && *version != "1.0") {
    return unsupported("version", describe_json(*version), "gearbox reads version 1.0");
  }
  for (const char* key : {"truncation", "padding"}) {
    if (const Json* v = top.find(key); v != nullptr) {
      return unsupported(key, describe_json(*v), "gearbox never truncates or pads; only null is implemented");
    }
  }
  const Json* model = top.find("model");
  if (model == nullptr) return malformed("model", "is missing");
  GEARBOX_RETURN_IF_ERROR(read_model(Node(*model, "model"), t.bpe));
  if (const Json* v = top.find("normalizer"); v != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_normalizer(Node(*v, "normalizer"), t.normalizer));
  }
  if (const Json* v = top.find("pre_tokenizer"); v != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_pre_tokenizer(Node(*v, "pre_tokenizer"), t.pre_tokenizer));
  }
  if (const Json* v = top.find("decoder"); v != nullptr) {
    t.has_decoder = true;
    GEARBOX_RETURN_IF_ERROR(read_decoder(Node(*v, "decoder"), t.decoder));
  }
  if (const Json* v = top.find("post_processor"); v != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_post_processor(Node(*v, "post_processor")));
  }
  GEARBOX_RETURN_IF_ERROR(read_added_tokens(top.find("added_tokens"), t));

  // Normalized tokens match, and decode from, their normalized form (`tokenizers` 0.22+).
  for (size_t i = 0; i < t.added.size(); ++i) {
    AddedToken& token = t.added[i];
    token.decoded = token.normalized ? t.normalize(token.content) : token.content;
    if (token.normalized) {
      t.normalized_matcher.add(token.decoded, i);
    } else {
      t.raw_matcher.add(token.content, i);
    }
  }
  t.raw_matcher.finish();
  t.normalized_matcher.finish();
  for (const auto& [id, token] : t.bpe.tokens) t.vocab_size = std::max(t.vocab_size, id + 1);
  for (const AddedToken& token : t.added) t.vocab_size = std::max(t.vocab_size, token.id + 1);
  return {};
}

}  // namespace

HfTokenizer::HfTokenizer(std::unique_ptr<const Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

Result<HfTokenizer> HfTokenizer::from_json(std::string_view json_text) {
  try {
    auto impl = std::make_unique<Impl>();
    GEARBOX_RETURN_IF_ERROR(read_tokenizer(json_text, *impl));
    return HfTokenizer(std::move(impl));
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while reading tokenizer.json");
  } catch (const std::exception& e) {
    return data_loss(std::string("tokenizer.json: ") + e.what());
  }
}

Result<std::vector<int64_t>> HfTokenizer::encode(std::string_view text) const {
  if (const size_t bad = find_invalid_utf8(text); bad != kNpos) {
    return invalid_argument("cannot tokenize: the text is not valid UTF-8 (at byte " + std::to_string(bad) + ")");
  }
  try {
    return impl_->encode(text);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while tokenizing");
  }
}

Result<std::string> HfTokenizer::decode(std::span<const int64_t> ids) const {
  try {
    return impl_->decode(ids);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while detokenizing");
  }
}

int64_t HfTokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (const auto it = impl_->added_by_content.find(key); it != impl_->added_by_content.end()) {
    return impl_->added[it->second].id;
  }
  const auto it = impl_->bpe.vocab.find(key);
  return it == impl_->bpe.vocab.end() ? -1 : it->second;
}

int64_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }

}  // namespace gearbox::cli
