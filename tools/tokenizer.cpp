#include "tokenizer.h"

#include <sentencepiece_processor.h>

namespace gearbox::cli {

Tokenizer::Tokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::from_sentencepiece(const std::string& model_bytes) {
  if (model_bytes.empty()) {
    return not_found(
        "the engine carries no tokenizer (build it from a checkpoint with tokenizer.model, or pass "
        "--prompt-ids)");
  }
  Tokenizer t;
  const auto status = t.sp_->LoadFromSerializedProto(model_bytes);
  if (!status.ok()) return data_loss("the engine's SentencePiece model does not load: " + status.ToString());
  return t;
}

Result<std::vector<int64_t>> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) return invalid_argument("cannot tokenize the prompt: " + status.ToString());
  return std::vector<int64_t>(ids.begin(), ids.end());
}

Result<std::string> Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow(ids.begin(), ids.end());
  std::string text;
  const auto status = sp_->Decode(narrow, &text);
  if (!status.ok()) return invalid_argument("cannot detokenize: " + status.ToString());
  return text;
}

}  // namespace gearbox::cli
