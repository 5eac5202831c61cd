// Text <-> token ids for the CLI, from the tokenizer an engine carries in its metadata:
// "tokenizer.sentencepiece" (the checkpoint's tokenizer.model) or "tokenizer.hf_json" (its
// Hugging Face tokenizer.json, for checkpoints that ship no tokenizer.model).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace gearbox::cli {

class HfTokenizer;

class Tokenizer {
 public:
  /// Errors: kNotFound when `model_bytes` is empty (the engine has no tokenizer),
  /// kDataLoss when SentencePiece cannot load it.
  static Result<Tokenizer> from_sentencepiece(const std::string& model_bytes);
  /// A tokenizer.json of the BPE family (tokenizer_json.h says which features). Errors:
  /// kNotFound when `json_text` is empty (the engine has no tokenizer), kDataLoss when it
  /// is malformed, kUnimplemented (naming the field) for a feature gearbox does not implement.
  static Result<Tokenizer> from_hf_json(const std::string& json_text);

  /// The ids of `text`, without a BOS (the caller adds it).
  Result<std::vector<int64_t>> encode(const std::string& text) const;
  /// The text of `ids`; special / control tokens are left out.
  Result<std::string> decode(const std::vector<int64_t>& ids) const;
  /// The tokenizer.json tokenizer this wraps, or null for a SentencePiece model.
  const HfTokenizer* hf_json() const { return hf_.get(); }

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  Tokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // one of the two is set
  std::unique_ptr<HfTokenizer> hf_;
};

/// The ids around a checkpoint's text prompt: the BOS `gearbox generate` puts before it and
/// the EOS ids generation stops at.
struct PromptTokens {
  int64_t bos = -1;  ///< -1: the checkpoint's tokenizer adds none
  std::vector<int64_t> eos;
};

/// What `gearbox build --hf` stores as "tokenizer.bos" and "tokenizer.eos", from the ids of
/// config.json and generation_config.json (`config_bos`, `config_eos`) and the tokenizer files:
///  - BOS: tokenizer_config.json's add_bos_token when it has one (true: its bos_token, as
///    transformers' Llama and Gemma tokenizers do), else the template of tokenizer.json's
///    post_processor (Llama 3 and Gemma: the token it puts first; Qwen2: none), else the
///    config's;
///  - EOS: the config's, and tokenizer_config.json's eos_token.
/// `tokenizer_json` is the checkpoint's tokenizer.json as read, null when it has none gearbox
/// reads (tokenizer_config.json's token names are then not resolved); `tokenizer_config_json`
/// is tokenizer_config.json's text, empty when absent.
/// Errors: kDataLoss when tokenizer_config.json is not a JSON object, a field has the wrong type,
/// or it names a token that tokenizer.json lacks.
Result<PromptTokens> prompt_tokens(int64_t config_bos, std::vector<int64_t> config_eos,
                                   const HfTokenizer* tokenizer_json, std::string_view tokenizer_config_json);

/// tokenizer.json as `gearbox build` stores it in an engine ("tokenizer.hf_json"): minified,
/// since a metadata value holds at most 16 MiB (Gemma-3's file is 33 MB as published, about
/// 13 MB minified). Errors: kDataLoss when it is not valid JSON, kOutOfRange when it is too
/// large even minified.
Result<std::string> compact_hf_json(const std::string& json_text);

}  // namespace gearbox::cli
