#include "tokenizer.h"

#include <exception>
#include <new>

#include <sentencepiece_processor.h>
#include <nlohmann/json.hpp>

#include "core/bounded_json.h"
#include "tokenizer_json.h"

namespace gearbox::cli {
namespace {

constexpr const char* kNoTokenizer =
    "the engine carries no tokenizer (build it from a checkpoint with tokenizer.model or tokenizer.json, or pass "
    "--prompt-ids)";

// The largest metadata value an engine file holds (docs/FORMAT.md).
constexpr size_t kMaxMetadataValueBytes = size_t{16} << 20;

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::from_sentencepiece(const std::string& model_bytes) {
  if (model_bytes.empty()) return not_found(kNoTokenizer);
  Tokenizer t;
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = t.sp_->LoadFromSerializedProto(model_bytes);
  if (!status.ok()) return data_loss("the engine's SentencePiece model does not load: " + status.ToString());
  return t;
}

Result<Tokenizer> Tokenizer::from_hf_json(const std::string& json_text) {
  if (json_text.empty()) return not_found(kNoTokenizer);
  Result<HfTokenizer> hf = HfTokenizer::from_json(json_text);
  if (!hf.ok()) return hf.status();
  Tokenizer t;
  t.hf_ = std::make_unique<HfTokenizer>(std::move(*hf));
  return t;
}

Result<std::vector<int64_t>> Tokenizer::encode(const std::string& text) const {
  if (hf_) return hf_->encode(text);
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) return invalid_argument("cannot tokenize the prompt: " + status.ToString());
  return std::vector<int64_t>(ids.begin(), ids.end());
}

Result<std::string> Tokenizer::decode(const std::vector<int64_t>& ids) const {
  if (hf_) return hf_->decode(ids);
  std::vector<int> narrow(ids.begin(), ids.end());
  std::string text;
  const auto status = sp_->Decode(narrow, &text);
  if (!status.ok()) return invalid_argument("cannot detokenize: " + status.ToString());
  return text;
}

Result<std::string> compact_hf_json(const std::string& json_text) {
  try {
    bool too_deep = false;
    const nlohmann::json root = parse_json_bounded(json_text, too_deep);
    if (too_deep) return data_loss("tokenizer.json: " + json_too_deep_message());
    if (root.is_discarded()) return data_loss("tokenizer.json is not valid JSON");
    std::string compact = root.dump();
    if (compact.size() > kMaxMetadataValueBytes) {
      return out_of_range("tokenizer.json is " + std::to_string(compact.size()) +
                          " bytes even minified; an engine's metadata value holds at most 16 MiB");
    }
    return compact;
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while reading tokenizer.json");
  } catch (const std::exception& e) {
    return data_loss(std::string("tokenizer.json: ") + e.what());
  }
}

}  // namespace gearbox::cli
