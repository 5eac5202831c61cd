// Text <-> token ids with a Hugging Face tokenizer.json of the BPE family: the layouts that
// SentencePiece models convert to (Gemma, Llama-2, Mistral) and the byte-level ones of
// Llama 3, Qwen2/2.5/3 and GPT-2, for checkpoints that ship no tokenizer.model.
//
// It reproduces the `tokenizers` library (encode without added special tokens, decode
// skipping special tokens) for:
//   added_tokens   matched literally (leftmost-longest) before BPE: `normalized: false` ones
//                  in the raw text, `normalized: true` ones in the normalized text;
//                  `lstrip` / `rstrip` take the whitespace next to them
//   normalizer     null, Sequence, Replace (String pattern), Prepend, NFC (utf8proc)
//   pre_tokenizer  null, Sequence, Metaspace (prepend_scheme always / first / never, split),
//                  Split (String or Regex pattern, any behavior, invert), ByteLevel
//                  (add_prefix_space, use_regex; trim_offsets changes offsets only)
//   model          BPE: merges by rank, byte_fallback to <0xNN> tokens, unk_token, fuse_unk,
//                  ignore_merges
//   decoder        null, Sequence, Replace (String pattern), ByteFallback, Fuse, Strip,
//                  Metaspace, ByteLevel
//   post_processor null, ByteLevel, TemplateProcessing whose single template is [BOS] $A or
//                  $A, or a Sequence of those (the caller adds the BOS, bos_id() says which,
//                  as `gearbox generate` does from "tokenizer.bos")
// Regex patterns run on PCRE2 in UTF + UCP mode, written to match as the Oniguruma regexes of
// `tokenizers` do (tokenizer_json_internal.h says how). Anything else (another model,
// normalizer, pre-tokenizer or decoder type, a Regex in Replace, dropout, single_word added
// tokens, a field this code does not know) is an error naming the field, never silently
// ignored.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/status.h"

namespace gearbox::cli {

class HfTokenizer {
 public:
  /// Parses a tokenizer.json. Errors: kDataLoss when it is not valid JSON or is
  /// inconsistent (a merge of tokens outside the vocabulary, an added token whose id
  /// disagrees with the vocabulary...), kUnimplemented for a feature this reader does not
  /// implement (the message names the field).
  static Result<HfTokenizer> from_json(std::string_view json_text);

  /// The ids of `text` (valid UTF-8), without special tokens added (no BOS).
  /// Errors: kInvalidArgument for text that is not UTF-8, or that needs an unk_token the
  /// vocabulary lacks; kResourceExhausted when a Regex pre-tokenizer exceeds PCRE2's match
  /// limit on it (catastrophic backtracking).
  Result<std::vector<int64_t>> encode(std::string_view text) const;
  /// The text of `ids`; special added tokens are skipped, as are ids that name no token.
  Result<std::string> decode(std::span<const int64_t> ids) const;

  /// The id of a token (model vocabulary or added token), or -1.
  int64_t token_to_id(std::string_view token) const;
  /// One past the largest id.
  int64_t vocab_size() const;
  /// The special token the post_processor's template puts before the text ([BOS] $A), or
  /// -1 when it adds none.
  int64_t bos_id() const;

  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer();

  struct Impl;

 private:
  explicit HfTokenizer(std::unique_ptr<const Impl> impl);
  std::unique_ptr<const Impl> impl_;
};

}  // namespace gearbox::cli
