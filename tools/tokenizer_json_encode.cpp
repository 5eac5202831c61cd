// Text to ids: added tokens, the normalizer and the pre-tokenizer of tokenizer.json, then
// the model on each pre-token.
#include "core/check.h"
#include "tokenizer_json_internal.h"

namespace gearbox::cli {
namespace {

using hf_json::AddedToken;
using hf_json::bytes_to_byte_level;
using hf_json::kNpos;
using hf_json::Matcher;
using hf_json::NormalizerKind;
using hf_json::NormalizerStep;
using hf_json::Piece;
using hf_json::PrependScheme;
using hf_json::PreTokenizerKind;
using hf_json::PreTokenizerStep;
using hf_json::Regex;
using hf_json::replace_all;
using hf_json::SplitBehavior;
using hf_json::white_space_end;
using hf_json::white_space_start;

// NormalizedString::split: the [start, end) ranges of the pieces, with a literal delimiter
// or a regex (Pattern::find_matches), the matches inverted or not (Invert).
std::vector<std::pair<size_t, size_t>> split_ranges(std::string_view s, std::string_view delimiter, const Regex* regex,
                                                    bool invert, SplitBehavior behavior) {
  struct Part {
    size_t start;
    size_t end;
    bool match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  const auto add_match = [&](size_t start, size_t end) {
    if (start != prev) parts.push_back({prev, start, invert});
    parts.push_back({start, end, !invert});
    prev = end;
  };
  if (regex != nullptr) {
    for (const auto& [start, end] : regex->find_all(s)) add_match(start, end);
  } else if (!delimiter.empty()) {
    for (size_t pos = s.find(delimiter); pos != kNpos; pos = s.find(delimiter, prev)) {
      add_match(pos, pos + delimiter.size());
    }
  }
  if (prev != s.size()) parts.push_back({prev, s.size(), invert});

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
    switch (step.kind) {
      case NormalizerKind::kPrepend:
        if (!text.empty()) text = step.content + text;
        break;
      case NormalizerKind::kReplace: text = replace_all(text, step.pattern, step.content); break;
      case NormalizerKind::kNfc: text = hf_json::nfc(text); break;
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
    if (step.kind == PreTokenizerKind::kByteLevel) {
      // ByteLevel: a space before a piece that lacks one, GPT-2's regex, then each byte as
      // its character.
      std::string text = std::move(piece.text);
      if (step.add_prefix_space && text.compare(0, 1, " ") != 0) text.insert(0, " ");
      if (step.regex == nullptr) {
        out.push_back({bytes_to_byte_level(text), -1, piece.at_start});
        continue;
      }
      for (const auto& [a, b] : split_ranges(text, "", step.regex.get(), false, SplitBehavior::kIsolated)) {
        if (b > a) {
          out.push_back({bytes_to_byte_level(std::string_view(text).substr(a, b - a)), -1, piece.at_start && a == 0});
        }
      }
      continue;
    }
    std::string text;
    SplitBehavior behavior = step.behavior;
    if (step.kind == PreTokenizerKind::kMetaspace) {
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
    const bool split_step = step.kind == PreTokenizerKind::kSplit;
    for (const auto& [a, b] : split_ranges(text, step.pattern, split_step ? step.regex.get() : nullptr,
                                           split_step && step.invert, behavior)) {
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

}  // namespace gearbox::cli
