// Text <-> token ids for the CLI, from the SentencePiece model an engine carries in its
// metadata ("tokenizer.sentencepiece", copied from the checkpoint's tokenizer.model).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gearbox/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace gearbox::cli {

class Tokenizer {
 public:
  /// Errors: kNotFound when `model_bytes` is empty (the engine has no tokenizer),
  /// kDataLoss when SentencePiece cannot load it.
  static Result<Tokenizer> from_sentencepiece(const std::string& model_bytes);
  Result<std::vector<int64_t>> encode(const std::string& text) const;
  Result<std::string> decode(const std::vector<int64_t>& ids) const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  Tokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace gearbox::cli
