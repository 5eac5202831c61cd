// The CUDA decode attention kernels against the CPU kernels (devices/cpu/kernels.h) as the reference;
// the shared helpers and conventions (poisoned outputs, sentinels, tolerances) are in
// tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h.
// Label `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_attention_util.h"
#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

TEST_F(CudaKernels, AttentionDecodeMatchesCpu) {
  // A fresh sequence (positions from 0) and decode steps after a filled cache (700, 701).
  const std::vector<std::vector<int64_t>> position_sets = {{0}, {0, 1}, iota(0, 7), {700}, {700, 701}};
  for (const AttentionCase& c : checked_attention_cases()) {
    for (const std::vector<int64_t>& pos : position_sets) {
      const auto T = static_cast<int64_t>(pos.size());
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 60);
      const std::vector<float> kc = make_cache(c, pos, 61), vc = make_cache(c, pos, 62);
      Floats d_kc(kc), d_vc(vc);
      const std::vector<float> want = cpu_attention(c, q, kc, vc, pos);
      for (bool pos_i64 : {false, true}) {
        Indices d_pos(pos_i64, pos);
        for (int max_splits : {1, 16}) {
          const std::vector<float> got =
              run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, T, max_splits, launch_);
          EXPECT_TRUE(close(attention_name("attention_decode", c, pos, max_splits), got, want, {2e-5, 1e-4}));
        }
      }
    }
  }
}

// Every number of query heads a block serves, in the cluster and the combine kernel's forms,
// at one query and two, against the CPU; and the counts the launcher must refuse.
TEST_F(CudaKernels, AttentionDecodeMatchesCpuForAnyHeadsPerBlock) {
  const std::vector<std::vector<int64_t>> position_sets = {{0}, {700}, {700, 701}};
  for (const AttentionCase& c : checked_attention_cases()) {
    const int64_t group = c.heads / c.kv_heads;
    if (group < 2) continue;
    for (const std::vector<int64_t>& pos : position_sets) {
      const auto T = static_cast<int64_t>(pos.size());
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 63);
      const std::vector<float> kc = make_cache(c, pos, 64), vc = make_cache(c, pos, 65);
      Floats d_kc(kc), d_vc(vc);
      Indices d_pos(false, pos);
      const std::vector<float> want = cpu_attention(c, q, kc, vc, pos);
      for (int hpb : {1, 2, 4, 8}) {
        if (group % hpb != 0) continue;
        for (int max_splits : {1, 16, 32}) {
          const std::vector<float> got =
              run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, T, max_splits, launch_, nullptr, hpb);
          EXPECT_TRUE(
              close(attention_name("attention_decode", c, pos, max_splits) + " heads_per_block " + std::to_string(hpb),
                    got, want, {2e-5, 1e-4}));
        }
      }
    }
  }
  const AttentionCase c = {8, 2, 64, 0};  // a group of 4
  const Floats q(random_floats(c.heads * c.head_dim, 66));
  const Floats out = Floats::poisoned(c.heads * c.head_dim);
  const Floats kc(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 67));
  const Floats vc(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 68));
  const Floats partials = Floats::poisoned(cuda::attention_decode_partials_floats(1, c.heads, c.head_dim, 16));
  Indices pos(false, {5});
  for (int hpb : {-1, 3, 8, 16}) {
    EXPECT_EQ(cuda::attention_decode(q.get(), nullptr, nullptr, kc.get(), vc.get(), pos.get(), false, out.get(), 1,
                                     c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window, 0.125f, partials.get(), 16,
                                     nullptr, launch_, false, {}, hpb),
              cudaErrorInvalidValue)
        << "heads_per_block " << hpb;
  }
}

TEST_F(CudaKernels, AttentionDecodeIsTheSameForAnyNumberOfSplits) {
  const AttentionCase c = {4, 1, 256, 0};
  const std::vector<int64_t> pos = {700, 701};
  const std::vector<float> q = random_floats(2 * c.heads * c.head_dim, 70);
  const std::vector<float> kc = make_cache(c, pos, 71), vc = make_cache(c, pos, 72);
  Floats d_kc(kc), d_vc(vc);
  Indices d_pos(true, pos);
  const std::vector<float> want = cpu_attention(c, q, kc, vc, pos);
  const std::vector<float> one = run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, 2, 1, launch_);
  EXPECT_TRUE(close("decode, 1 split", one, want, {2e-5, 1e-4}));
  // Launched as on a device of many SMs, so that the two queries take every split max_splits
  // allows (attention_decode_grid caps them by the SM count).
  cuda::DeviceLimits many_sms = *launch_.limits;
  many_sms.sm_count = 1 << 20;
  const cuda::Launch wide{launch_.stream, false, false, &many_sms};
  for (int max_splits : {4, 16, 64, 256}) {
    const std::vector<float> got =
        run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, 2, max_splits, wide);
    EXPECT_TRUE(close("decode splits " + std::to_string(max_splits) + " vs 1", got, one, {1e-5, 1e-5}));
  }
}

// The grid (splits, heads per block) the launcher picks from the call's shapes and SM count.
TEST(CudaDecodeGrid, FollowsTheKeysTheQueriesAndTheSms) {
  struct Case {
    int64_t T, heads, kv_heads, max_ctx, window;
    int max_splits, sm_count, heads_per_block;
    cuda::DecodeGrid want;
    const char* why;
  };
  const Case cases[] = {
      {1, 4, 1, 1024, 0, 16, 132, 0, {16, 1}, "Gemma-3-1B's global layer: the keys' splits, capped at 16"},
      {1, 4, 1, 2048, 512, 32, 132, 0, {16, 1}, "its sliding layer: the window's 16 splits"},
      {1, 4, 1, 1024, 3, 16, 132, 0, {1, 1}, "a 3-key window needs no split"},
      {1, 4, 1, 100, 0, 64, 132, 0, {4, 1}, "at least 32 keys per split"},
      {1, 32, 8, 2048, 0, 32, 16, 0, {32, 4}, "one query keeps its splits; kG 4 leaves 32 * 8 = 256 blocks"},
      {1, 16, 8, 2048, 0, 32, 132, 0, {32, 2}, "Qwen3-0.6B: kG 2 leaves 32 * 8 = 256 blocks"},
      {1, 32, 8, 128, 0, 32, 132, 0, {4, 1}, "4 splits: kG 1 leaves 128 blocks, none leaves 256"},
      {1, 48, 8, 2048, 0, 32, 132, 0, {32, 2}, "a group of 6: kG 2, the largest power of two dividing it"},
      {1, 32, 8, 2048, 0, 32, 132, 1, {32, 1}, "heads_per_block set: the keys' splits and that kG"},
      {8, 4, 1, 2048, 0, 32, 132, 0, {5, 1}, "8 rows of 4 heads: 5 splits fill 132 SMs"},
      {32, 4, 1, 2048, 0, 32, 132, 0, {2, 1}, "32 rows: 2 splits; 256 blocks at kG 1 only"},
      {2, 4, 1, 128, 0, 32, 132, 0, {4, 1}, "the keys' own bound is lower"},
      {4096, 8, 8, 2048, 0, 32, 132, 0, {1, 1}, "a prefill's rows fill the SMs alone"},
      {64, 32, 8, 2048, 0, 32, 132, 0, {1, 4}, "kG 4 still leaves 64 * 8 = 512 blocks"},
      {64, 32, 8, 2048, 0, 32, 132, 2, {1, 2}, "heads_per_block set with several queries: their splits"},
  };
  for (const Case& c : cases) {
    const cuda::DecodeGrid got = cuda::attention_decode_grid(c.T, c.heads, c.kv_heads, c.max_ctx, c.window,
                                                             c.max_splits, c.sm_count, c.heads_per_block);
    EXPECT_EQ(got.splits, c.want.splits) << c.why;
    EXPECT_EQ(got.heads_per_block, c.want.heads_per_block) << c.why;
  }
}

// The splits' partials combine inside a thread-block cluster where the sm_90 code runs (up to
// 16 splits), else in a second kernel through the partials. Both paths against the CPU and
// each other: the second kernel's is taken here on any GPU by launching with limits that say
// the sm_90 code does not run (a GPU without clusters; no programmatic dependent launch
// either). Where it does not run, both launches take the second kernel.
TEST_F(CudaKernels, AttentionDecodeCombinesInAClusterOrInASecondKernel) {
  cuda::DeviceLimits no_clusters = *launch_.limits;
  no_clusters.hopper_code_runs = false;
  const cuda::Launch second_kernel{launch_.stream, false, false, &no_clusters};
  const std::vector<int64_t> pos = {700, 701};
  for (const AttentionCase& c : checked_attention_cases()) {
    const std::vector<float> q = random_floats(2 * c.heads * c.head_dim, 73);
    const std::vector<float> kc = make_cache(c, pos, 74), vc = make_cache(c, pos, 75);
    Floats d_kc(kc), d_vc(vc);
    Indices d_pos(false, pos);
    const std::vector<float> want = cpu_attention(c, q, kc, vc, pos);
    for (int max_splits : {2, 16}) {
      const std::string what = attention_name("attention_decode", c, pos, max_splits);
      const std::vector<float> cluster =
          run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, 2, max_splits, launch_);
      const std::vector<float> second =
          run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, 2, max_splits, second_kernel);
      EXPECT_TRUE(close(what + ", cluster combine", cluster, want, {2e-5, 1e-4}));
      EXPECT_TRUE(close(what + ", combine kernel", second, want, {2e-5, 1e-4}));
      EXPECT_TRUE(close(what + ", cluster vs combine kernel", cluster, second, {1e-5, 1e-5}));
    }
  }
}

TEST_F(CudaKernels, AttentionDecodeWithNewRowsEqualsCacheWriteThenAttention) {
  // The new rows of the caches hold NaN before the call: reading them instead of k_new /
  // v_new would show. T = 1 is the fused path, T = 3 the kv_cache_write + attention one.
  // positions_from_host: the kernel loads its first keys before waiting for the previous
  // kernel, which here is the one writing k_new / v_new (NaN until then): a key p read early,
  // from k_new or from the cache, would show as NaN. Positions 2 and 33 put p in a warp's
  // first step.
  for (const AttentionCase& c : checked_attention_cases()) {
    for (const std::vector<int64_t>& pos : {std::vector<int64_t>{0}, std::vector<int64_t>{2}, std::vector<int64_t>{33},
                                            std::vector<int64_t>{700}, std::vector<int64_t>{300, 301, 302}}) {
      const auto T = static_cast<int64_t>(pos.size());
      const int64_t width = c.kv_heads * c.head_dim;
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 63);
      const std::vector<float> k_new = random_floats(T * width, 64), v_new = random_floats(T * width, 65);
      std::vector<float> kc = make_cache(c, pos, 66), vc = make_cache(c, pos, 67);
      for (int64_t t = 0; t < T; ++t) {
        std::fill_n(kc.begin() + pos[t] * width, width, kNaN);
        std::fill_n(vc.begin() + pos[t] * width, width, kNaN);
      }
      for (const auto& [max_splits, from_host] : {std::pair{1, false}, std::pair{16, false}, std::pair{64, false},
                                                  std::pair{1, true}, std::pair{16, true}, std::pair{64, true}}) {
        const std::vector<float> nans(static_cast<size_t>(T * width), kNaN),
            zeros(static_cast<size_t>(T * width), 0.0f);
        Floats d_kc(kc), d_vc(vc), d_k_src(k_new), d_v_src(v_new), d_k_new(nans), d_v_new(nans), d_zero(zeros), d_q(q);
        Indices d_pos(false, pos);
        Floats out = Floats::poisoned(T * c.heads * c.head_dim);
        Floats partials = Floats::poisoned(cuda::attention_decode_partials_floats(T, c.heads, c.head_dim, max_splits));
        sync();
        ASSERT_EQ(cudaSuccess, cuda::add(d_k_src.get(), d_zero.get(), d_k_new.get(), T * width, launch_));
        ASSERT_EQ(cudaSuccess, cuda::add(d_v_src.get(), d_zero.get(), d_v_new.get(), T * width, launch_));
        ASSERT_EQ(cudaSuccess,
                  cuda::attention_decode(d_q.get(), d_k_new.get(), d_v_new.get(), d_kc.get(), d_vc.get(), d_pos.get(),
                                         false, out.get(), T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window,
                                         1.0f / std::sqrt(static_cast<float>(c.head_dim)), partials.get(), max_splits,
                                         flag(), launch_, from_host));
        EXPECT_EQ(take_flag(), 0);
        sync();
        std::vector<float> kc_want = kc, vc_want = vc;
        for (int64_t t = 0; t < T; ++t) {
          std::copy_n(k_new.begin() + t * width, width, kc_want.begin() + pos[t] * width);
          std::copy_n(v_new.begin() + t * width, width, vc_want.begin() + pos[t] * width);
        }
        const std::string what = attention_name(
            from_host ? "attention_decode with new rows, first keys early" : "attention_decode with new rows", c, pos,
            max_splits);
        EXPECT_TRUE(close(what, out.download(), cpu_attention(c, q, kc_want, vc_want, pos), {2e-5, 1e-4}));
        // The caches: the new rows written, every other row as it was (NaN rows compare equal).
        const std::vector<float> kc_got = d_kc.download(), vc_got = d_vc.download();
        size_t differ = 0;
        for (size_t i = 0; i < kc_got.size(); ++i) {
          const auto same = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
          differ += !same(kc_got[i], kc_want[i]) || !same(vc_got[i], vc_want[i]);
        }
        EXPECT_EQ(differ, 0u) << what << ": cache elements not as kv_cache_write leaves them";
        EXPECT_TRUE(out.guard_intact() && d_kc.guard_intact() && d_vc.guard_intact()) << what;
      }
    }
  }
}

// attention_decode_head_norm (the q / k norms and RoPE inside the decode attention) against
// head_norm_rope then attention_decode on the same device: the output, and the caches with the
// rotated key and v written at row p and every other row untouched. bf16 norm weights for every
// case, f32 and f16 for the first (the weights are read as the type says, nothing else
// depends on it); head dims 8, 12, 80 and 256; kG 1, 2 and 8 (64 heads on 8 KV heads: a warp
// normalizes two heads);
// one split, a cluster, more splits than a cluster takes; positions that put p in a warp's first
// step; an uploaded angle table and computed angles; the first keys loaded before the wait or
// not. The projections are written by a kernel launched right before (NaN until then), and the
// caches hold NaN at row p: reading either early shows.
TEST_F(CudaKernels, AttentionDecodeHeadNormEqualsHeadNormRopeThenAttention) {
  constexpr AttentionCase kCases[] = {{4, 1, 256, 512}, {4, 1, 256, 0}, {4, 2, 80, 3}, {8, 8, 8, 0},
                                      {4, 2, 12, 5},    {16, 4, 80, 0}, {64, 8, 64, 0}};
  for (DataType type : kWeightTypes) {
    for (const AttentionCase& c : kCases) {
      if (type != DataType::kBF16 && &c != &kCases[0]) continue;
      for (int64_t p : {0, 2, 33, 700}) {
        const std::vector<int64_t> pos = {p};
        const int64_t width = c.kv_heads * c.head_dim, hd = c.head_dim;
        const std::vector<float> q = random_floats(c.heads * hd, 81, -3.0f, 3.0f);
        const std::vector<float> k = random_floats(width, 82, -3.0f, 3.0f), v = random_floats(width, 83);
        const Weights wq = make_weights(type, random_floats(hd, 84)), wk = make_weights(type, random_floats(hd, 85));
        DeviceBuffer<uint8_t> d_wq(wq.bytes), d_wk(wk.bytes);
        std::vector<float> kc = make_cache(c, pos, 86), vc = make_cache(c, pos, 87);
        std::fill_n(kc.begin() + p * width, width, kNaN);
        std::fill_n(vc.begin() + p * width, width, kNaN);
        std::vector<float> freq;
        for (int64_t i = 0; i < hd / 2; ++i) freq.push_back(cpu::rope_inv_freq(1e4f, i, hd));
        Floats d_freq(freq);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (int max_splits : {1, 16, 64}) {
          for (bool from_host : {false, true}) {
            const bool table = max_splits != 16;
            const std::string what = attention_name("attention_decode_head_norm", c, pos, max_splits) + " " +
                                     data_type_name(type) + (from_host ? " early keys" : "") +
                                     (table ? " angle table" : " computed angles");
            const std::vector<float> nans_q(q.size(), kNaN), nans_kv(static_cast<size_t>(width), kNaN);
            const std::vector<float> zeros(q.size(), 0.0f);
            Floats d_q_src(q), d_k_src(k), d_v_src(v), d_zero(zeros);
            Floats d_q(nans_q), d_k(nans_kv), d_v(nans_kv), d_kc(kc), d_vc(vc), d_kc_want(kc), d_vc_want(vc);
            Floats q_rot = Floats::poisoned(c.heads * hd), k_rot = Floats::poisoned(width);
            Floats out = Floats::poisoned(c.heads * hd), want = Floats::poisoned(c.heads * hd);
            const int64_t floats = cuda::attention_decode_partials_floats(1, c.heads, hd, max_splits);
            Floats partials = Floats::poisoned(floats), partials_want = Floats::poisoned(floats);
            Indices d_pos(p % 2 == 0, pos);
            sync();
            ASSERT_EQ(
                cudaSuccess, with_weight_type(type, [&](auto tag) -> cudaError_t {
                  using W = decltype(tag);
                  const W* q_w = weight_ptr<W>(d_wq, 0);
                  const W* k_w = weight_ptr<W>(d_wk, 0);
                  const float* inv_freq = table ? d_freq.get() : nullptr;
                  // The unfused chain: head_norm_rope, then the attention of the rotated rows.
                  const cuda::HeadNormRope<W> parts[2] = {
                      {d_q_src.get(), q_w, q_rot.get(), c.heads, 1e4f, 1.0f, inv_freq},
                      {d_k_src.get(), k_w, k_rot.get(), c.kv_heads, 1e4f, 1.0f, inv_freq}};
                  cudaError_t err =
                      cuda::head_norm_rope<W>(parts, 2, d_pos.get(), d_pos.i64, 1, hd, 1e-6f, 1.0f, flag(), launch_);
                  if (err != cudaSuccess) return err;
                  err =
                      cuda::attention_decode(q_rot.get(), k_rot.get(), d_v_src.get(), d_kc_want.get(), d_vc_want.get(),
                                             d_pos.get(), d_pos.i64, want.get(), 1, c.heads, c.kv_heads, hd, kMaxCtx,
                                             c.window, scale, partials_want.get(), max_splits, flag(), launch_);
                  if (err != cudaSuccess) return err;
                  // The fused launch, right behind the kernels that write its inputs.
                  for (auto [src, dst, n] : {std::tuple{&d_q_src, &d_q, c.heads * hd},
                                             std::tuple{&d_k_src, &d_k, width}, std::tuple{&d_v_src, &d_v, width}}) {
                    err = cuda::add(src->get(), d_zero.get(), dst->get(), n, launch_);
                    if (err != cudaSuccess) return err;
                  }
                  const cuda::AttentionHeadNorm<W> norm{q_w, k_w, 1e-6f, 1.0f, 1e4f, 1.0f, inv_freq};
                  return cuda::attention_decode_head_norm<W>(d_q.get(), d_k.get(), d_v.get(), d_kc.get(), d_vc.get(),
                                                             d_pos.get(), d_pos.i64, out.get(), c.heads, c.kv_heads, hd,
                                                             kMaxCtx, c.window, scale, norm, partials.get(), max_splits,
                                                             flag(), launch_, from_host);
                }));
            EXPECT_EQ(take_flag(), 0) << what;
            EXPECT_TRUE(close(what, out.download(), want.download(), {1e-5, 1e-4})) << what;
            // The caches: row p holds the rotated key (to the RMS sums' order) and v; every other
            // row is bit for bit what it was.
            const std::vector<float> kc_got = d_kc.download(), vc_got = d_vc.download();
            const std::vector<float> kc_want = d_kc_want.download(), vc_want = d_vc_want.download();
            const auto row = [&](const std::vector<float>& cache) {
              return std::vector<float>(cache.begin() + p * width, cache.begin() + (p + 1) * width);
            };
            EXPECT_TRUE(close(what + " key row", row(kc_got), row(kc_want), {1e-6, 1e-5}));
            EXPECT_EQ(row(vc_got), row(vc_want)) << what;
            size_t differ = 0;
            for (size_t i = 0; i < kc_got.size(); ++i) {
              if (static_cast<int64_t>(i) / width == p) continue;
              const auto same = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
              differ += !same(kc_got[i], kc[i]) || !same(vc_got[i], vc[i]);
            }
            EXPECT_EQ(differ, 0u) << what << ": cache rows other than p changed";
            EXPECT_TRUE(out.guard_intact() && partials.guard_intact() && d_kc.guard_intact() && d_vc.guard_intact() &&
                        d_q.guard_intact() && d_k.guard_intact() && d_v.guard_intact())
                << what;
          }
        }
      }
    }
  }
}

/// Whether a and b hold the same bits (NaN rows included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A position outside the cache gives NaN rows, writes no cache row and sets the flag, as
// head_norm_rope then attention_decode do; what the launch cannot serve is rejected.
TEST_F(CudaKernels, AttentionDecodeHeadNormBadPositionAndBadArguments) {
  const AttentionCase c = {4, 1, 256, 0};
  const int64_t hd = c.head_dim, width = c.kv_heads * hd;
  const std::vector<float> kc = make_cache(c, {5}, 91), vc = make_cache(c, {5}, 92);
  const Weights w = make_weights(DataType::kBF16, random_floats(hd, 93));
  DeviceBuffer<uint8_t> d_w(w.bytes);
  const auto* wp = weight_ptr<__nv_bfloat16>(d_w, 0);
  const cuda::AttentionHeadNorm<__nv_bfloat16> norm{wp, wp, 1e-6f, 1.0f, 1e4f, 1.0f, nullptr};
  Floats d_q(random_floats(c.heads * hd, 94)), d_k(random_floats(width, 95)), d_v(random_floats(width, 96));
  Floats partials = Floats::poisoned(cuda::attention_decode_partials_floats(1, c.heads, hd, 64));
  const float scale = 1.0f / 16.0f;
  for (int64_t p : {int64_t{-1}, kMaxCtx}) {
    for (bool from_host : {false, true}) {
      Floats d_kc(kc), d_vc(vc);
      Floats out = Floats::poisoned(c.heads * hd);
      Indices d_pos(true, {p});
      ASSERT_EQ(cudaSuccess,
                cuda::attention_decode_head_norm<__nv_bfloat16>(
                    d_q.get(), d_k.get(), d_v.get(), d_kc.get(), d_vc.get(), d_pos.get(), true, out.get(), c.heads,
                    c.kv_heads, hd, kMaxCtx, c.window, scale, norm, partials.get(), 64, flag(), launch_, from_host));
      EXPECT_EQ(take_flag(), 1) << "position " << p;
      const std::vector<float> got = out.download();
      EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float x) { return std::isnan(x); })) << "position " << p;
      EXPECT_TRUE(same_bits(d_kc.download(), kc)) << "position " << p << ": the key cache changed";
      EXPECT_TRUE(same_bits(d_vc.download(), vc)) << "position " << p << ": the value cache changed";
    }
  }
  Floats d_kc(kc), d_vc(vc);
  Floats out = Floats::poisoned(c.heads * hd);
  Indices d_pos(true, {5});
  const auto launch = [&](const float* k, int64_t head_dim, const cuda::AttentionHeadNorm<__nv_bfloat16>& n) {
    return cuda::attention_decode_head_norm<__nv_bfloat16>(d_q.get(), k, d_v.get(), d_kc.get(), d_vc.get(), d_pos.get(),
                                                           true, out.get(), c.heads, c.kv_heads, head_dim, kMaxCtx, 0,
                                                           scale, n, partials.get(), 64, flag(), launch_);
  };
  cuda::AttentionHeadNorm<__nv_bfloat16> no_q = norm, no_k = norm;
  no_q.q_w = nullptr;
  no_k.k_w = nullptr;
  EXPECT_EQ(launch(nullptr, hd, norm), cudaErrorInvalidValue) << "no new key";
  EXPECT_EQ(launch(d_k.get(), 255, norm), cudaErrorInvalidValue) << "odd head_dim";
  EXPECT_EQ(launch(d_k.get(), 512, norm), cudaErrorInvalidValue) << "head_dim past the attention's limit";
  EXPECT_EQ(launch(d_k.get(), hd, no_q), cudaErrorInvalidValue) << "no q norm weights";
  EXPECT_EQ(launch(d_k.get(), hd, no_k), cudaErrorInvalidValue) << "no k norm weights";
  sync();
  EXPECT_TRUE(same_bits(d_kc.download(), kc)) << "a rejected launch wrote the cache";
  EXPECT_EQ(take_flag(), 0);
}

}  // namespace
}  // namespace gearbox
