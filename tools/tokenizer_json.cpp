// HfTokenizer's public calls, which turn failures into a Status; tokenizer_json_internal.h
// says which file holds each part of the pipeline. Each step follows the `tokenizers`
// library (Rust) closely, corner cases included, because that library is the reference the
// tests compare against (tests/data/tokenizer/cases.json).
#include "tokenizer_json.h"

#include <exception>
#include <new>

#include "core/check.h"
#include "tokenizer_json_internal.h"

namespace gearbox::cli {

using hf_json::find_invalid_utf8;
using hf_json::kNpos;
using hf_json::read_tokenizer;

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
  } catch (const hf_json::RegexMatchError& e) {
    return resource_exhausted(std::string("cannot tokenize: ") + e.what());
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

int64_t HfTokenizer::bos_id() const { return impl_->bos_id; }

}  // namespace gearbox::cli
