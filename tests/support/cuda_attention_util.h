// Shared helpers of the CUDA attention tests: caches with NaN where no query may look, one
// launch of each attention kernel, the CPU reference and the name of a case.
#pragma once

#include "support/cuda_test_util.h"

namespace gearbox::cuda_test {

using kernel_cases::AttentionCase;
using kernel_cases::kMmaTolerance;
inline constexpr int64_t kMaxCtx = kernel_cases::kAttentionMaxCtx;

/// The table's attention cases that the tests check (tests/support/cuda_kernel_cases.h).
inline std::vector<AttentionCase> checked_attention_cases() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : kernel_cases::attention_cases()) {
    if (c.use.check) cases.push_back(c);
  }
  return cases;
}

/// The limits of a device with `sms` SMs and nothing else known: the split counts the tests
/// expect follow from the SM count alone, whatever GPU runs the tests.
inline cuda::DeviceLimits with_sms(int sms) {
  cuda::DeviceLimits limits;
  limits.sm_count = sms;
  return limits;
}

/// Caches [kMaxCtx, kv_heads * hd] with random rows where some query can look and NaN in
/// every other row, so that a kernel reading outside [lo, p] produces NaN.
inline std::vector<float> make_cache(const AttentionCase& c, const std::vector<int64_t>& pos, uint32_t seed) {
  const int64_t width = c.kv_heads * c.head_dim;
  std::vector<float> cache = random_floats(kMaxCtx * width, seed);
  const int64_t hi = *std::max_element(pos.begin(), pos.end());
  int64_t lo = hi;
  for (int64_t p : pos) lo = std::min(lo, c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0);
  for (int64_t j = 0; j < kMaxCtx; ++j) {
    if (j < lo || j > hi) std::fill_n(cache.begin() + j * width, width, kNaN);
  }
  return cache;
}

enum class AttentionKernel { kDecode, kPrefill, kPrefillMma };

/// Runs one attention kernel and returns its output (checking sentinels, partials included).
/// heads_per_block: the decode kernel's (0: the launcher's choice).
inline std::vector<float> run_attention(AttentionKernel kernel, const AttentionCase& c, const std::vector<float>& q,
                                        const Floats& kc, const Floats& vc, const Indices& pos, int64_t T,
                                        int max_splits, const cuda::Launch& launch, int* error_flag = nullptr,
                                        int heads_per_block = 0) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  Floats d_q(q);
  Floats out = Floats::poisoned(T * c.heads * c.head_dim);
  int64_t scratch = cuda::attention_prefill_scratch_floats(T, c.heads, c.head_dim, *launch.limits);
  if (kernel == AttentionKernel::kDecode) {
    scratch = cuda::attention_decode_partials_floats(T, c.heads, c.head_dim, max_splits);
  } else if (kernel == AttentionKernel::kPrefillMma) {
    scratch = cuda::attention_prefill_mma_scratch_floats(T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, *launch.limits);
  }
  Floats partials = Floats::poisoned(std::max<int64_t>(1, scratch));
  cudaError_t err;
  if (kernel == AttentionKernel::kDecode) {
    err = cuda::attention_decode(d_q.get(), nullptr, nullptr, kc.get(), vc.get(), pos.get(), pos.i64, out.get(), T,
                                 c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window, scale, partials.get(), max_splits,
                                 error_flag, launch, false, {}, heads_per_block);
  } else if (kernel == AttentionKernel::kPrefillMma) {
    err = cuda::attention_prefill_mma(d_q.get(), nullptr, nullptr, kc.get(), vc.get(), pos.get(), pos.i64, out.get(), T,
                                      c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window, scale, partials.get(),
                                      error_flag, launch);
  } else {
    err = cuda::attention_prefill(d_q.get(), kc.get(), vc.get(), pos.get(), pos.i64, out.get(), T, c.heads, c.kv_heads,
                                  c.head_dim, kMaxCtx, c.window, scale, partials.get(), launch);
  }
  CUDA_CHECK(err);
  CUDA_CHECK(cudaStreamSynchronize(launch.stream));
  if (!out.guard_intact() || !partials.guard_intact()) throw std::runtime_error("attention wrote past its outputs");
  return out.download();
}

inline std::vector<float> cpu_attention(const AttentionCase& c, const std::vector<float>& q,
                                        const std::vector<float>& kc, const std::vector<float>& vc,
                                        const std::vector<int64_t>& pos) {
  cpu::AttentionShape s;
  s.T = static_cast<int64_t>(pos.size());
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.window = c.window;
  s.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> out(static_cast<size_t>(s.T * c.heads * c.head_dim));
  std::vector<float> scratch(static_cast<size_t>(cpu::attention_scratch_floats(s, kMaxCtx)));
  cpu::attention_rowwise(q.data(), kc.data(), vc.data(), pos.data(), DataType::kI64, out.data(), s, scratch.data());
  return out;
}

inline std::string attention_name(const char* kernel, const AttentionCase& c, const std::vector<int64_t>& pos,
                                  int splits) {
  return std::string(kernel) + " " +
         shape({{"heads", c.heads},
                {"kv", c.kv_heads},
                {"hd", c.head_dim},
                {"window", c.window},
                {"T", static_cast<int64_t>(pos.size())},
                {"first_pos", pos.front()},
                {"max_splits", splits}});
}

inline std::vector<float> bf16_values(std::vector<float> v) {
  for (float& x : v) x = __bfloat162float(__float2bfloat16_rn(x));
  return v;
}

}  // namespace gearbox::cuda_test
