#include "tokenizer.h"

#include <algorithm>
#include <exception>
#include <new>
#include <optional>

#include <sentencepiece_processor.h>
#include <nlohmann/json.hpp>

#include "core/bounded_json.h"
#include "models/json_describe.h"
#include "tokenizer_json.h"

namespace gearbox::cli {
namespace {

constexpr const char* kNoTokenizer =
    "the engine carries no tokenizer (build it from a checkpoint with tokenizer.model or tokenizer.json, or pass "
    "--prompt-ids)";

// The largest metadata value an engine file holds (docs/FORMAT.md).
constexpr size_t kMaxMetadataValueBytes = size_t{16} << 20;

// A token of tokenizer_config.json: a string, an AddedToken object ({"content": ...}) or null.
Result<std::optional<std::string>> token_name(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return data_loss(std::string("tokenizer_config.json: ") + key +
                   " must be a token (a string or {\"content\": ...}), got " + models::describe_json(*it));
}

Result<PromptTokens> prompt_tokens_or_throw(int64_t config_bos, std::vector<int64_t> config_eos, const HfTokenizer* hf,
                                            std::string_view tokenizer_config_json) {
  PromptTokens out{config_bos, std::move(config_eos)};
  if (hf != nullptr) out.bos = hf->bos_id();
  if (tokenizer_config_json.empty()) return out;
  bool too_deep = false;
  const nlohmann::json config = parse_json_bounded(tokenizer_config_json, too_deep);
  if (too_deep) return data_loss("tokenizer_config.json: " + json_too_deep_message());
  if (!config.is_object()) return data_loss("tokenizer_config.json is not a JSON object");
  Result<std::optional<std::string>> bos_name = token_name(config, "bos_token");
  if (!bos_name.ok()) return bos_name.status();
  Result<std::optional<std::string>> eos_name = token_name(config, "eos_token");
  if (!eos_name.ok()) return eos_name.status();
  // A name resolves through tokenizer.json; -1 without one.
  const auto id_of = [&](const std::optional<std::string>& name, const char* key) -> Result<int64_t> {
    if (hf == nullptr || !name) return int64_t{-1};
    const int64_t id = hf->token_to_id(*name);
    if (id < 0) {
      return data_loss(std::string("tokenizer_config.json: ") + key + " '" + *name +
                       "' is not a token of tokenizer.json");
    }
    return id;
  };
  if (const auto add_bos = config.find("add_bos_token"); add_bos != config.end() && !add_bos->is_null()) {
    if (!add_bos->is_boolean()) {
      return data_loss("tokenizer_config.json: add_bos_token must be true or false, got " +
                       models::describe_json(*add_bos));
    }
    Result<int64_t> id = id_of(*bos_name, "bos_token");
    if (!id.ok()) return id.status();
    out.bos = !add_bos->get<bool>() ? -1 : (*id >= 0 ? *id : config_bos);
  }
  Result<int64_t> eos = id_of(*eos_name, "eos_token");
  if (!eos.ok()) return eos.status();
  if (*eos >= 0 && std::find(out.eos.begin(), out.eos.end(), *eos) == out.eos.end()) out.eos.push_back(*eos);
  return out;
}

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

Result<PromptTokens> prompt_tokens(int64_t config_bos, std::vector<int64_t> config_eos,
                                   const HfTokenizer* tokenizer_json, std::string_view tokenizer_config_json) {
  try {
    return prompt_tokens_or_throw(config_bos, std::move(config_eos), tokenizer_json, tokenizer_config_json);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while reading the tokenizer files");
  } catch (const std::exception& e) {
    return data_loss(std::string("tokenizer_config.json: ") + e.what());
  }
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
