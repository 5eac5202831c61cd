// Helpers shared by the examples: opening a method, token ids inside the vocabulary, one
// call through ExecuTorch's Module with the profile it ran, strict flag parsing.
#pragma once

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/executorch/backend.h"

namespace example {

namespace et = ::executorch::runtime;

// Registers gearbox's backend and loads `method` of the program `pte` that `module` holds;
// returns the method's vocabulary (the last extent of its first output, the logits), or -1
// after printing what failed.
inline int64_t open_method(executorch::extension::Module& module, const std::string& pte, const std::string& method) {
  if (!gearbox::executorch::register_backend().ok()) {
    std::fprintf(stderr, "cannot register the gearbox backend with ExecuTorch\n");
    return -1;
  }
  if (const auto e = module.load_method(method); e != et::Error::Ok) {
    std::fprintf(stderr, "cannot load method '%s' of %s: %s\n", method.c_str(), pte.c_str(), et::to_string(e));
    return -1;
  }
  if (auto meta = module.method_meta(method); meta.ok()) {
    if (auto out = meta->output_tensor_meta(0); out.ok() && !out->sizes().empty()) {
      const int64_t vocab = out->sizes()[out->sizes().size() - 1];
      if (vocab > 0) return vocab;
    }
  }
  std::fprintf(stderr, "cannot read the vocabulary from the logits of '%s'\n", method.c_str());
  return -1;
}

// `n` token ids inside [0, vocab): a fixed, spread-out pattern, never an id >= vocab.
inline std::vector<int64_t> token_ids(int64_t n, int64_t vocab, int64_t salt = 0) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (2 + (i + salt) * 7919) % vocab;
  return ids;
}

struct Call {
  bool ok = false;
  std::string error;     // when !ok
  int32_t profile = -1;  // the profile the (first) engine ran
  std::string name;      // its name
  double ms = 0.0;       // wall time of Module::execute
  std::vector<float> logits;
};

// Runs `method` on ids at positions [start, start + ids.size()).
inline Call run(executorch::extension::Module& module, const std::string& method, const std::vector<int64_t>& ids,
                int64_t start) {
  const auto n = static_cast<executorch::aten::SizesType>(ids.size());
  std::vector<int64_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = start + static_cast<int64_t>(i);
  auto tokens = executorch::extension::make_tensor_ptr({1, n}, std::vector<int64_t>(ids));
  auto positions = executorch::extension::make_tensor_ptr({1, n}, std::move(pos));
  (void)gearbox::executorch::take_profile_records();
  Call call;
  const auto t0 = std::chrono::steady_clock::now();
  auto out = module.execute(method, {tokens, positions});
  call.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!out.ok()) {
    call.error = std::string("ExecuTorch error ") + et::to_string(out.error());
    return call;
  }
  const std::vector<gearbox::executorch::ProfileRecord> records = gearbox::executorch::take_profile_records();
  if (!records.empty()) {
    call.profile = records.front().profile;
    call.name = records.front().name;
  }
  const auto& t = (*out)[0].toTensor();
  call.logits.assign(t.const_data_ptr<float>(), t.const_data_ptr<float>() + t.numel());
  call.ok = true;
  return call;
}

// Parses a whole decimal integer in [lo, hi]; false (with a message) otherwise.
inline bool parse_int(std::string_view flag, std::string_view text, int64_t lo, int64_t hi, int64_t* out) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
    std::fprintf(stderr, "%.*s: '%.*s' is not an integer in [%lld, %lld]\n", static_cast<int>(flag.size()), flag.data(),
                 static_cast<int>(text.size()), text.data(), static_cast<long long>(lo), static_cast<long long>(hi));
    return false;
  }
  *out = v;
  return true;
}

}  // namespace example
