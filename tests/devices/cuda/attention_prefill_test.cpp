// The CUDA prefill attention kernels (tiled and tensor-core) against the CPU kernels (devices/cpu/kernels.h) as the
// reference; the shared helpers and conventions (poisoned outputs, sentinels, tolerances) are in
// tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h.
// Label `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_attention_util.h"
#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

TEST_F(CudaKernels, AttentionPrefillMatchesCpu) {
  for (const AttentionCase& c : checked_attention_cases()) {
    for (int64_t T : {1, 2, 7, 33, 129}) {
      // From 0 (a prompt), and a chunk continuing at 700 (chunked prefill after a filled cache).
      for (int64_t start : {int64_t{0}, int64_t{700}}) {
        if (start == 700 && T > 33) continue;
        const std::vector<int64_t> pos = iota(start, T);
        const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 80);
        const std::vector<float> kc = make_cache(c, pos, 81), vc = make_cache(c, pos, 82);
        Floats d_kc(kc), d_vc(vc);
        Indices d_pos(T % 2 == 0, pos);
        const std::vector<float> got = run_attention(AttentionKernel::kPrefill, c, q, d_kc, d_vc, d_pos, T, 1, launch_);
        EXPECT_TRUE(
            close(attention_name("attention_prefill", c, pos, 0), got, cpu_attention(c, q, kc, vc, pos), {2e-5, 1e-4}));
      }
    }
  }
}

TEST_F(CudaKernels, AttentionPrefillSplitOrNotMatchesCpu) {
  // 32 heads: 300 tokens give 19 * 32 = 608 row blocks (no split), 40 tokens 96 (split 6
  // ways, combined by the second kernel); causal and sliding.
  const cuda::DeviceLimits sms132 = with_sms(132);
  EXPECT_EQ(cuda::attention_prefill_splits(300, 32, sms132), 1);
  EXPECT_EQ(cuda::attention_prefill_splits(40, 32, sms132), 6);
  EXPECT_EQ(cuda::attention_prefill_splits(40, 32, with_sms(66)), 3) << "half the SMs, half the blocks";
  EXPECT_EQ(cuda::attention_prefill_splits(1, 4, sms132), 8) << "at most 8 splits";
  EXPECT_EQ(cuda::attention_prefill_scratch_floats(300, 32, 64, sms132),
            cuda::attention_decode_partials_floats(256, 32, 64, 2))
      << "256 tokens split 2 ways: the largest tokens x splits up to 300";
  for (const AttentionCase& c : {AttentionCase{32, 8, 64, 0}, AttentionCase{32, 8, 64, 100}}) {
    for (int64_t T : {40, 300}) {
      const std::vector<int64_t> pos = iota(5, T);
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 83);
      const std::vector<float> kc = make_cache(c, pos, 84), vc = make_cache(c, pos, 85);
      Floats d_kc(kc), d_vc(vc);
      Indices d_pos(true, pos);
      const std::vector<float> got = run_attention(AttentionKernel::kPrefill, c, q, d_kc, d_vc, d_pos, T, 1, launch_);
      const std::string what =
          attention_name("attention_prefill", c, pos, cuda::attention_prefill_splits(T, c.heads, *launch_.limits));
      EXPECT_TRUE(close(what, got, cpu_attention(c, q, kc, vc, pos), {2e-5, 1e-4}));
    }
  }
}

TEST_F(CudaKernels, AttentionBadPositionGivesNaNRowsAndBadShapesAreRejected) {
  const AttentionCase c = {4, 2, 80, 0};
  const std::vector<int64_t> pos = {5, kMaxCtx, 6};  // the middle one is past the cache
  const std::vector<float> q = random_floats(3 * c.heads * c.head_dim, 90);
  Floats d_kc(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 91));
  Floats d_vc(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 92));
  Indices d_pos(false, pos);
  const int64_t row = c.heads * c.head_dim;
  for (AttentionKernel kernel : {AttentionKernel::kDecode, AttentionKernel::kPrefill, AttentionKernel::kPrefillMma}) {
    const std::vector<float> got = run_attention(kernel, c, q, d_kc, d_vc, d_pos, 3, 16, launch_, flag());
    // The decode kernel reports the bad position (the runtime reads the flag); prefill's is
    // reported by the KV-cache write that runs before it.
    EXPECT_EQ(take_flag(), kernel == AttentionKernel::kDecode ? 1 : 0);
    EXPECT_TRUE(all_nan("row of the bad position", got, row, 2 * row));
    EXPECT_TRUE(std::all_of(got.begin(), got.begin() + row, [](float v) { return std::isfinite(v); }));
    EXPECT_TRUE(std::all_of(got.begin() + 2 * row, got.end(), [](float v) { return std::isfinite(v); }));
  }
  Floats out = Floats::poisoned(1);
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::attention_decode(out.get(), nullptr, nullptr, out.get(), out.get(), d_pos.get(), false, out.get(), 1,
                                   4, 1, 300, kMaxCtx, 0, 1.0f, out.get(), 4, nullptr, launch_))
      << "head_dim above 256";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::attention_decode(out.get(), out.get(), nullptr, out.get(), out.get(), d_pos.get(), false, out.get(),
                                   1, 4, 1, 8, kMaxCtx, 0, 1.0f, out.get(), 4, nullptr, launch_))
      << "k_new without v_new";
  EXPECT_EQ(cudaErrorInvalidValue, cuda::attention_prefill(out.get(), out.get(), out.get(), d_pos.get(), false,
                                                           out.get(), 1, 6, 4, 8, kMaxCtx, 0, 1.0f, nullptr, launch_))
      << "heads not a multiple of kv_heads";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::attention_prefill_mma(out.get(), nullptr, nullptr, out.get(), out.get(), d_pos.get(), false,
                                        out.get(), 1, 4, 1, 300, kMaxCtx, 0, 1.0f, out.get(), nullptr, launch_))
      << "head_dim above 256";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::attention_prefill_mma(out.get(), out.get(), nullptr, out.get(), out.get(), d_pos.get(), false,
                                        out.get(), 1, 4, 1, 8, kMaxCtx, 0, 1.0f, out.get(), nullptr, launch_))
      << "k_new without v_new";
}

/// The tensor-core prefill at `pos` against the CPU on bf16-exact q, k, v (seeds from `seed`).
void expect_prefill_mma_matches_cpu(const AttentionCase& c, const std::vector<int64_t>& pos, bool pos_i64,
                                    uint32_t seed, const cuda::Launch& launch) {
  const auto T = static_cast<int64_t>(pos.size());
  const std::vector<float> q = bf16_values(random_floats(T * c.heads * c.head_dim, seed));
  const std::vector<float> kc = bf16_values(make_cache(c, pos, seed + 1));
  const std::vector<float> vc = bf16_values(make_cache(c, pos, seed + 2));
  Floats d_kc(kc), d_vc(vc);
  Indices d_pos(pos_i64, pos);
  const std::vector<float> got = run_attention(AttentionKernel::kPrefillMma, c, q, d_kc, d_vc, d_pos, T, 1, launch);
  const std::string what =
      attention_name("attention_prefill_mma", c, pos, cuda::attention_prefill_mma_splits(T, c.heads, *launch.limits));
  EXPECT_TRUE(close(what, got, cpu_attention(c, q, kc, vc, pos), kMmaTolerance));
}

TEST_F(CudaKernels, AttentionPrefillMmaMatchesCpu) {
  for (const AttentionCase& c : checked_attention_cases()) {
    for (int64_t T : {1, 2, 7, 33, 64, 65, 129}) {
      for (int64_t start : {int64_t{0}, int64_t{700}}) {
        if (start == 700 && T > 65) continue;
        expect_prefill_mma_matches_cpu(c, iota(start, T), T % 2 == 1, 86, launch_);
      }
    }
  }
}

TEST_F(CudaKernels, AttentionPrefillMmaSplitOrNotMatchesCpu) {
  // 32 heads: 40 tokens give 32 row blocks (split 4 ways), 300 give 160 (2 ways), 600 give
  // 320 (no split); causal and sliding.
  const cuda::DeviceLimits sms132 = with_sms(132);
  EXPECT_EQ(cuda::attention_prefill_mma_splits(40, 32, sms132), 4);
  EXPECT_EQ(cuda::attention_prefill_mma_splits(300, 32, sms132), 2);
  EXPECT_EQ(cuda::attention_prefill_mma_splits(600, 32, sms132), 1);
  EXPECT_EQ(cuda::attention_prefill_mma_scratch_floats(600, 32, 8, 64, kMaxCtx, sms132),
            kMaxCtx * 8 * 64 + cuda::attention_decode_partials_floats(512, 32, 64, 2))
      << "bf16 rows of both caches, then 512 tokens split 2 ways: the largest tokens x splits up to 600";
  EXPECT_EQ(cuda::attention_prefill_mma_scratch_floats(600, 32, 8, 12, kMaxCtx, sms132),
            cuda::attention_decode_partials_floats(512, 32, 12, 2))
      << "head_dim 12: no 16-byte rows, converted while staging";
  for (const AttentionCase& c : {AttentionCase{32, 8, 64, 0}, AttentionCase{32, 8, 64, 100}}) {
    for (int64_t T : {40, 300, 600}) expect_prefill_mma_matches_cpu(c, iota(5, T), true, 89, launch_);
  }
}

// Where head_dim % 8 == 0 and the scratch is 16-byte aligned, the tensor-core prefill copies
// its tiles from bf16 rows a first kernel converted (cp.async); otherwise it converts them
// while staging. Both round the same values the same way and sum in the same order, so their
// outputs are identical: a scratch one float off its alignment takes the second path.
TEST_F(CudaKernels, AttentionPrefillMmaCopiesOrConvertsItsTilesToTheSameBits) {
  for (const AttentionCase& c : checked_attention_cases()) {
    if (c.head_dim % 8 != 0) continue;
    for (const std::vector<int64_t>& pos : {iota(0, 7), iota(0, 129), iota(700, 65), iota(3, 300)}) {
      const auto T = static_cast<int64_t>(pos.size());
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 95);
      Floats kc(make_cache(c, pos, 96)), vc(make_cache(c, pos, 97));
      Indices d_pos(true, pos);
      Floats d_q(q);
      const int64_t scratch =
          cuda::attention_prefill_mma_scratch_floats(T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, *launch_.limits);
      std::vector<float> outs[2];
      for (int shift = 0; shift < 2; ++shift) {
        Floats out = Floats::poisoned(T * c.heads * c.head_dim);
        Floats partials = Floats::poisoned(scratch + 1);
        CUDA_CHECK(cuda::attention_prefill_mma(d_q.get(), nullptr, nullptr, kc.get(), vc.get(), d_pos.get(), true,
                                               out.get(), T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window,
                                               1.0f / std::sqrt(static_cast<float>(c.head_dim)), partials.get() + shift,
                                               nullptr, launch_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        ASSERT_TRUE(out.guard_intact() && partials.guard_intact());
        outs[shift] = out.download();
      }
      EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)), 0) << attention_name(
          "attention_prefill_mma", c, pos, cuda::attention_prefill_mma_splits(T, c.heads, *launch_.limits));
    }
  }
}

// Given the new rows, the tensor-core prefill writes them to the caches in the kernel that
// converts the rows its queries see to bf16: outputs and caches must be what kv_cache_write
// followed by the attention leaves. The new rows hold NaN in the caches before the call, so
// converting them from there instead of from k_new / v_new would show. Positions: prompts
// from 0, a chunk after filled rows (700), a run from 3, two runs with a gap (each row of the
// gap's range checked against the call's positions), one position out of range (flagged,
// nothing written for it); k_new one float off 16 bytes takes kv_cache_write + the
// attention (as head_dim 12 does).
TEST_F(CudaKernels, AttentionPrefillMmaWithNewRowsEqualsCacheWriteThenAttention) {
  std::vector<int64_t> gap = iota(10, 20);
  for (int64_t p : iota(300, 20)) gap.push_back(p);
  const std::vector<int64_t> bad = {5, 6, kMaxCtx, 8};
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    size_t differ = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      differ += !(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])));
    }
    return differ;
  };
  for (const AttentionCase& c : checked_attention_cases()) {
    for (const std::vector<int64_t>& pos : {iota(0, 7), iota(0, 129), iota(700, 65), iota(3, 300), gap, bad}) {
      const auto T = static_cast<int64_t>(pos.size());
      const int64_t width = c.kv_heads * c.head_dim;
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 98);
      const std::vector<float> k_new = random_floats(T * width, 99), v_new = random_floats(T * width, 100);
      const std::vector<int64_t> in_range = pos == bad ? std::vector<int64_t>{5, 6, 8} : pos;
      std::vector<float> kc = make_cache(c, in_range, 101), vc = make_cache(c, in_range, 102);
      std::vector<float> kc_want = kc, vc_want = vc;
      for (int64_t t = 0; t < T; ++t) {
        if (pos[t] >= kMaxCtx) continue;
        std::fill_n(kc.begin() + pos[t] * width, width, kNaN);
        std::fill_n(vc.begin() + pos[t] * width, width, kNaN);
        std::copy_n(k_new.begin() + t * width, width, kc_want.begin() + pos[t] * width);
        std::copy_n(v_new.begin() + t * width, width, vc_want.begin() + pos[t] * width);
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const int64_t scratch =
          cuda::attention_prefill_mma_scratch_floats(T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, *launch_.limits);
      Indices d_pos(true, pos);
      Floats d_q(q);
      // The reference: the attention alone over the caches as kv_cache_write leaves them.
      Floats ref_kc(kc_want), ref_vc(vc_want);
      Floats ref_out = Floats::poisoned(T * c.heads * c.head_dim);
      Floats ref_scratch = Floats::poisoned(std::max<int64_t>(1, scratch));
      CUDA_CHECK(cuda::attention_prefill_mma(d_q.get(), nullptr, nullptr, ref_kc.get(), ref_vc.get(), d_pos.get(), true,
                                             ref_out.get(), T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window,
                                             scale, ref_scratch.get(), nullptr, launch_));
      sync();
      const std::vector<float> want = ref_out.download();
      for (int shift = 0; shift < 2; ++shift) {
        std::vector<float> k_in(static_cast<size_t>(shift), 0.0f), v_in(static_cast<size_t>(shift), 0.0f);
        k_in.insert(k_in.end(), k_new.begin(), k_new.end());
        v_in.insert(v_in.end(), v_new.begin(), v_new.end());
        Floats d_kc(kc), d_vc(vc), d_k_new(k_in), d_v_new(v_in);
        Floats out = Floats::poisoned(T * c.heads * c.head_dim);
        Floats d_scratch = Floats::poisoned(std::max<int64_t>(1, scratch));
        CUDA_CHECK(cuda::attention_prefill_mma(d_q.get(), d_k_new.get() + shift, d_v_new.get() + shift, d_kc.get(),
                                               d_vc.get(), d_pos.get(), true, out.get(), T, c.heads, c.kv_heads,
                                               c.head_dim, kMaxCtx, c.window, scale, d_scratch.get(), flag(), launch_));
        EXPECT_EQ(take_flag(), pos == bad ? 1 : 0);
        sync();
        const std::string what = attention_name("attention_prefill_mma with new rows", c, pos,
                                                cuda::attention_prefill_mma_splits(T, c.heads, *launch_.limits)) +
                                 (shift != 0 ? " (k_new unaligned)" : "");
        EXPECT_EQ(same(out.download(), want), 0u) << what << ": outputs differ from cache write + attention";
        EXPECT_EQ(same(d_kc.download(), kc_want) + same(d_vc.download(), vc_want), 0u)
            << what << ": cache elements not as kv_cache_write leaves them";
        EXPECT_TRUE(out.guard_intact() && d_kc.guard_intact() && d_vc.guard_intact() && d_scratch.guard_intact())
            << what;
      }
    }
  }
}

TEST_F(CudaKernels, AttentionPrefillSkipsCacheRowsNoQuerySees) {
  // Two runs of positions far apart with a 3-key window: the keys between them (and every
  // row no query sees) are NaN, which a kernel staging a whole key range must not let reach
  // an output through a zero weight.
  const AttentionCase c = {4, 1, 256, 3};
  std::vector<int64_t> pos = iota(10, 20);
  for (int64_t p : iota(300, 20)) pos.push_back(p);
  const auto T = static_cast<int64_t>(pos.size());
  std::vector<float> kc = bf16_values(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 92));
  std::vector<float> vc = bf16_values(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 93));
  const int64_t width = c.kv_heads * c.head_dim;
  for (int64_t j = 0; j < kMaxCtx; ++j) {
    const bool seen = std::any_of(pos.begin(), pos.end(), [&](int64_t p) { return j <= p && j > p - c.window; });
    if (!seen) {
      std::fill_n(kc.begin() + j * width, width, kNaN);
      std::fill_n(vc.begin() + j * width, width, kNaN);
    }
  }
  const std::vector<float> q = bf16_values(random_floats(T * c.heads * c.head_dim, 94));
  Floats d_kc(kc), d_vc(vc);
  Indices d_pos(false, pos);
  const std::vector<float> want = cpu_attention(c, q, kc, vc, pos);
  EXPECT_TRUE(close("attention_prefill, gap in positions",
                    run_attention(AttentionKernel::kPrefill, c, q, d_kc, d_vc, d_pos, T, 1, launch_), want,
                    {2e-5, 1e-4}));
  EXPECT_TRUE(close("attention_prefill_mma, gap in positions",
                    run_attention(AttentionKernel::kPrefillMma, c, q, d_kc, d_vc, d_pos, T, 1, launch_), want,
                    kMmaTolerance));
}

}  // namespace
}  // namespace gearbox
