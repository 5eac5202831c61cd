// The CUDA RMSNorm, RoPE and fused head norm + RoPE kernels against the CPU kernels (devices/cpu/kernels.h) as the
// reference; the shared helpers and conventions (poisoned outputs, sentinels, tolerances) are in
// tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h.
// Label `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

// ---- RMSNorm ----------------------------------------------------------------------------------------

TEST_F(CudaKernels, RmsNormMatchesCpuOnAwkwardShapesAlignedAndNot) {
  for (DataType type : kWeightTypes) {
    for (int64_t dim : kernel_cases::rms_norm_dims()) {
      for (int64_t rows : kernel_cases::kRmsNormRows) {
        for (int lead : {0, 1}) {  // lead 1: x, y and w all misaligned -> the scalar path
          const float offset = lead == 0 ? 1.0f : 0.0f;
          const std::vector<float> x = random_floats(rows * dim, 3);
          const Weights w = make_weights(type, random_floats(dim, 4), lead);
          std::vector<float> x_lead(static_cast<size_t>(lead), 0.0f);
          x_lead.insert(x_lead.end(), x.begin(), x.end());
          Floats d_x(x_lead);
          DeviceBuffer<uint8_t> d_w(w.bytes);
          Floats y = Floats::poisoned(rows * dim + lead);
          ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                      using W = decltype(tag);
                      return cuda::rms_norm<W>(d_x.get() + lead, weight_ptr<W>(d_w, lead), y.get() + lead, rows, dim,
                                               1e-6f, offset, launch_);
                    }));
          sync();
          std::vector<float> want(x.size());
          cpu::rms_norm(x.data(), w.rounded.data(), want.data(), rows, dim, 1e-6f, offset);
          std::vector<float> got = y.download();
          got.erase(got.begin(), got.begin() + lead);
          const std::string what = std::string("rms_norm ") + data_type_name(type) + " " +
                                   shape({{"rows", rows}, {"dim", dim}, {"lead", lead}});
          EXPECT_TRUE(close(what, got, want));
          EXPECT_TRUE(y.guard_intact()) << what;
        }
      }
    }
  }
}

TEST_F(CudaKernels, RmsNormInPlace) {
  const int64_t rows = 5, dim = 1152;
  const std::vector<float> x = random_floats(rows * dim, 5);
  const std::vector<float> w = random_floats(dim, 6);
  Floats d_xy(x);
  Floats d_w(w);
  ASSERT_EQ(cudaSuccess, cuda::rms_norm<float>(d_xy.get(), d_w.get(), d_xy.get(), rows, dim, 1e-6f, 1.0f, launch_));
  sync();
  std::vector<float> want(x.size());
  cpu::rms_norm(x.data(), w.data(), want.data(), rows, dim, 1e-6f, 1.0f);
  EXPECT_TRUE(close("rms_norm in place", d_xy.download(), want));
  EXPECT_TRUE(d_xy.guard_intact());
}

// ---- RoPE ----------------------------------------------------------------------------------------------

TEST_F(CudaKernels, RopeMatchesCpuInPlaceAndNot) {
  for (bool pos_i64 : {false, true}) {
    for (int64_t heads : {1, 4}) {
      for (int64_t hd : {2, 8, 80, 256}) {
        for (int64_t T : {1, 7, 33}) {
          for (int64_t start : {0, 700}) {
            for (float theta : {1e4f, 1e6f}) {
              const std::vector<float> x = random_floats(T * heads * hd, 7);
              const std::vector<int64_t> pos = iota(start, T);
              Indices d_pos(pos_i64, pos);
              Floats d_x(x);
              Floats y = Floats::poisoned(T * heads * hd);
              const bool in_place = start == 700;
              float* out = in_place ? d_x.get() : y.get();
              ASSERT_EQ(cudaSuccess,
                        cuda::rope(d_x.get(), d_pos.get(), pos_i64, out, T, heads, hd, theta, 1.0f, flag(), launch_));
              EXPECT_EQ(take_flag(), 0);
              std::vector<float> want(x.size());
              ASSERT_TRUE(cpu::rope(x.data(), pos.data(), DataType::kI64, want.data(), T, heads, hd, theta).ok());
              // The f32 angle pos * inv_freq may differ by an ulp of inv_freq (powf rounding).
              std::vector<double> slack(x.size());
              for (int64_t t = 0; t < T; ++t) {
                for (int64_t e = 0; e < heads * hd; ++e) {
                  const int64_t base = t * heads * hd + e / hd * hd;
                  const int64_t i = e % hd % (hd / 2);
                  slack[t * heads * hd + e] =
                      2.5e-7 * static_cast<double>(pos[t]) * (std::abs(x[base + i]) + std::abs(x[base + i + hd / 2]));
                }
              }
              const std::string what = "rope " + shape({{"T", T}, {"heads", heads}, {"hd", hd}, {"start", start}}) +
                                       "theta=" + std::to_string(theta);
              EXPECT_TRUE(close(what, in_place ? d_x.download() : y.download(), want, {}, slack));
              EXPECT_TRUE(d_x.guard_intact() && y.guard_intact()) << what;
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaKernels, RopePositionScaleScalesThePosition) {
  // position_scale 0.5 at even positions p rotates exactly as scale 1 at p / 2.
  const int64_t T = 6, heads = 2, hd = 80;
  const std::vector<float> x = random_floats(T * heads * hd, 8);
  const std::vector<int64_t> pos = {0, 2, 10, 64, 700, 4096};
  std::vector<int64_t> half_pos;
  for (int64_t p : pos) half_pos.push_back(p / 2);
  Indices d_pos(false, pos);
  Floats d_x(x);
  Floats y = Floats::poisoned(T * heads * hd);
  ASSERT_EQ(cudaSuccess, cuda::rope(d_x.get(), d_pos.get(), false, y.get(), T, heads, hd, 1e4f, 0.5f, flag(), launch_));
  EXPECT_EQ(take_flag(), 0);
  std::vector<float> want(x.size());
  ASSERT_TRUE(cpu::rope(x.data(), half_pos.data(), DataType::kI64, want.data(), T, heads, hd, 1e4f).ok());
  EXPECT_TRUE(close("rope position_scale 0.5", y.download(), want, {2e-5, 1e-4}));
  EXPECT_TRUE(y.guard_intact());
}

TEST_F(CudaKernels, RopeWithFreqsMatchesCpu) {
  // Given inverse frequencies (Llama-3 scaling): the same f32 angles as the CPU, so only
  // sincosf and the rotation's rounding differ.
  for (int64_t hd : {2, 16, 128}) {
    for (float scale : {1.0f, 0.125f}) {
      const int64_t T = 9, heads = 3;
      const std::vector<float> x = random_floats(T * heads * hd, 10);
      std::vector<float> inv_freq;
      for (int64_t i = 0; i < hd / 2; ++i) inv_freq.push_back(0.9f / static_cast<float>(i + 1));
      const std::vector<int64_t> pos = iota(300, T);
      Indices d_pos(true, pos);
      Floats d_x(x);
      Floats d_freq(inv_freq);
      Floats y = Floats::poisoned(T * heads * hd);
      ASSERT_EQ(cudaSuccess, cuda::rope_with_freqs(d_x.get(), d_pos.get(), true, y.get(), T, heads, hd, d_freq.get(),
                                                   scale, flag(), launch_));
      EXPECT_EQ(take_flag(), 0);
      std::vector<float> want(x.size());
      ASSERT_TRUE(
          cpu::rope_with_freqs(x.data(), pos.data(), DataType::kI64, want.data(), T, heads, hd, inv_freq, scale).ok());
      const std::string what = "rope_with_freqs " + shape({{"hd", hd}}) + "scale=" + std::to_string(scale);
      EXPECT_TRUE(close(what, y.download(), want, {2e-5, 1e-4}));
      EXPECT_TRUE(y.guard_intact()) << what;
    }
  }
  Floats y = Floats::poisoned(8);
  Indices d_pos(true, {1});
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::rope_with_freqs(y.get(), d_pos.get(), true, y.get(), 1, 1, 8, nullptr, 1.0f, flag(), launch_))
      << "no table";
}

TEST_F(CudaKernels, RopeNegativePositionPoisonsItsRowAndSetsTheFlag) {
  const int64_t heads = 2, hd = 8;
  Indices d_pos(false, {3, -1});
  Floats d_x(random_floats(2 * heads * hd, 9));
  Floats y = Floats::poisoned(2 * heads * hd);
  ASSERT_EQ(cudaSuccess, cuda::rope(d_x.get(), d_pos.get(), false, y.get(), 2, heads, hd, 1e4f, 1.0f, flag(), launch_));
  EXPECT_EQ(take_flag(), 1);
  const std::vector<float> got = y.download();
  EXPECT_TRUE(all_nan("negative position row", got, heads * hd, 2 * heads * hd));
  EXPECT_TRUE(std::isfinite(got[0]));
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::rope(d_x.get(), d_pos.get(), false, y.get(), 2, heads, 7, 1e4f, 1.0f, flag(), launch_))
      << "odd head_dim";
}

// ---- fused chains ---------------------------------------------------------------------------------------

/// Slack for RoPE: the f32 angle may differ by an ulp of inv_freq (see RopeMatchesCpu...).
std::vector<double> rope_slack(const std::vector<float>& x, const std::vector<int64_t>& pos, int64_t heads,
                               int64_t hd) {
  std::vector<double> slack(x.size());
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int64_t e = 0; e < heads * hd; ++e) {
      const size_t base = t * static_cast<size_t>(heads * hd) + static_cast<size_t>(e / hd * hd);
      const auto i = static_cast<size_t>(e % hd % (hd / 2));
      slack[t * static_cast<size_t>(heads * hd) + static_cast<size_t>(e)] =
          2.5e-7 * static_cast<double>(pos[t]) * 4.0 * (std::abs(x[base + i]) + std::abs(x[base + i + hd / 2]));
    }
  }
  return slack;
}

TEST_F(CudaKernels, HeadNormRopeEqualsNormThenRopeForQAndK) {
  for (DataType type : kWeightTypes) {
    for (int64_t hd : {2, 6, 80, 256, 1024}) {  // 1024: threads loop over the rotation pairs
      for (int64_t T : {1, 3, 17, 40}) {
        for (bool in_place : {false, true}) {
          const int64_t q_heads = 4, k_heads = T == 3 ? 3 : 1;  // GQA; T == 3: odd head counts
          const std::vector<float> q = random_floats(T * q_heads * hd, 11, -3.0f, 3.0f);
          const std::vector<float> k = random_floats(T * k_heads * hd, 12, -3.0f, 3.0f);
          const Weights wq = make_weights(type, random_floats(hd, 13)), wk = make_weights(type, random_floats(hd, 14));
          const std::vector<int64_t> pos = iota(in_place ? 500 : 0, T);
          Indices d_pos(true, pos);
          Floats d_q(q), d_k(k);
          Floats yq = Floats::poisoned(q.size()), yk = Floats::poisoned(k.size());
          DeviceBuffer<uint8_t> d_wq(wq.bytes), d_wk(wk.bytes);
          float* out_q = in_place ? d_q.get() : yq.get();
          float* out_k = in_place ? d_k.get() : yk.get();
          // q's inverse frequencies from an uploaded table (as the engine runs it), k's computed.
          std::vector<float> q_freq;
          for (int64_t i = 0; i < hd / 2; ++i) q_freq.push_back(cpu::rope_inv_freq(1e4f, i, hd));
          Floats d_q_freq(q_freq);
          ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                      using W = decltype(tag);
                      const cuda::HeadNormRope<W> parts[2] = {
                          {d_q.get(), weight_ptr<W>(d_wq, 0), out_q, q_heads, 1e4f, 1.0f, d_q_freq.get()},
                          {d_k.get(), weight_ptr<W>(d_wk, 0), out_k, k_heads, 1e6f, 1.0f}};
                      return cuda::head_norm_rope<W>(parts, 2, d_pos.get(), true, T, hd, 1e-6f, 1.0f, flag(), launch_);
                    }));
          EXPECT_EQ(take_flag(), 0);
          auto reference = [&](const std::vector<float>& x, const Weights& w, int64_t heads, float theta) {
            std::vector<float> normed(x.size()), want(x.size());
            cpu::rms_norm(x.data(), w.rounded.data(), normed.data(), T * heads, hd, 1e-6f, 1.0f);
            EXPECT_TRUE(cpu::rope(normed.data(), pos.data(), DataType::kI64, want.data(), T, heads, hd, theta).ok());
            return std::make_pair(want, rope_slack(normed, pos, heads, hd));
          };
          const auto [want_q, slack_q] = reference(q, wq, q_heads, 1e4f);
          const auto [want_k, slack_k] = reference(k, wk, k_heads, 1e6f);
          const std::string what = std::string("head_norm_rope ") + data_type_name(type) + " " +
                                   shape({{"hd", hd}, {"T", T}, {"in_place", in_place}});
          EXPECT_TRUE(close(what + " q", in_place ? d_q.download() : yq.download(), want_q, {}, slack_q));
          EXPECT_TRUE(close(what + " k", in_place ? d_k.download() : yk.download(), want_k, {}, slack_k));
          EXPECT_TRUE(yq.guard_intact() && yk.guard_intact() && d_q.guard_intact() && d_k.guard_intact()) << what;
        }
      }
    }
  }
}

// Parts that only rotate (a family without q / k norms: kRopes steps) give rope()'s bytes,
// in the block form (one token) and the warp form (several), in place and not; a negative
// position poisons its rows and sets the flag as rope() does.
TEST_F(CudaKernels, HeadNormRopeRotateOnlyEqualsRopeBitForBit) {
  struct Case {
    int64_t hd, q_heads, k_heads;
  };
  for (const Case c : {Case{2, 3, 1}, Case{6, 4, 2}, Case{64, 32, 8}, Case{128, 5, 5}, Case{256, 4, 1}}) {
    for (int64_t T : {1, 3, 40}) {
      for (bool in_place : {false, true}) {
        const std::vector<float> q = random_floats(T * c.q_heads * c.hd, 41, -3.0f, 3.0f);
        const std::vector<float> k = random_floats(T * c.k_heads * c.hd, 42, -3.0f, 3.0f);
        const std::vector<int64_t> pos = iota(in_place ? 700 : 0, T);
        Indices d_pos(true, pos);
        // q's inverse frequencies from a table (Llama-3 scaling's form), k's computed.
        std::vector<float> q_freq;
        for (int64_t i = 0; i < c.hd / 2; ++i) q_freq.push_back(0.9f / static_cast<float>(i + 1));
        Floats d_q_freq(q_freq);
        Floats want_q = Floats::poisoned(q.size()), want_k = Floats::poisoned(k.size());
        {
          Floats src_q(q), src_k(k);
          ASSERT_EQ(cudaSuccess, cuda::rope_with_freqs(src_q.get(), d_pos.get(), true, want_q.get(), T, c.q_heads, c.hd,
                                                       d_q_freq.get(), 0.5f, flag(), launch_));
          ASSERT_EQ(cudaSuccess, cuda::rope(src_k.get(), d_pos.get(), true, want_k.get(), T, c.k_heads, c.hd, 1e6f,
                                            1.0f, flag(), launch_));
        }
        Floats d_q(q), d_k(k);
        Floats yq = Floats::poisoned(q.size()), yk = Floats::poisoned(k.size());
        cuda::HeadNormRope<float> parts[2] = {
            {d_q.get(), nullptr, in_place ? d_q.get() : yq.get(), c.q_heads, 0.0f, 0.5f, d_q_freq.get()},
            {d_k.get(), nullptr, in_place ? d_k.get() : yk.get(), c.k_heads, 1e6f, 1.0f}};
        parts[0].rotate_only = parts[1].rotate_only = true;
        ASSERT_EQ(cudaSuccess,
                  cuda::head_norm_rope<float>(parts, 2, d_pos.get(), true, T, c.hd, 0.0f, 0.0f, flag(), launch_));
        EXPECT_EQ(take_flag(), 0);
        const std::string what =
            "rotate-only head_norm_rope " +
            shape({{"hd", c.hd}, {"q_heads", c.q_heads}, {"k_heads", c.k_heads}, {"T", T}, {"in_place", in_place}});
        EXPECT_EQ(in_place ? d_q.download() : yq.download(), want_q.download()) << what << " q";
        EXPECT_EQ(in_place ? d_k.download() : yk.download(), want_k.download()) << what << " k";
        EXPECT_TRUE(yq.guard_intact() && yk.guard_intact() && d_q.guard_intact() && d_k.guard_intact()) << what;
      }
    }
  }
  const int64_t heads = 2, hd = 8;
  Indices d_pos(false, {3, -1});
  Floats d_x(random_floats(2 * heads * hd, 9));
  Floats y = Floats::poisoned(2 * heads * hd);
  cuda::HeadNormRope<float> part{d_x.get(), nullptr, y.get(), heads, 1e4f, 1.0f};
  part.rotate_only = true;
  ASSERT_EQ(cudaSuccess, cuda::head_norm_rope<float>(&part, 1, d_pos.get(), false, 2, hd, 0.0f, 0.0f, flag(), launch_));
  EXPECT_EQ(take_flag(), 1);
  const std::vector<float> got = y.download();
  EXPECT_TRUE(all_nan("rotate-only, negative position row", got, heads * hd, 2 * heads * hd));
  EXPECT_TRUE(std::isfinite(got[0]));
}

// The q and k of a stacked QKV linear's output y [T, Nq + Nk + Nv] (rows Nq + Nk + Nv floats
// apart) give what the same rows give as contiguous tensors, and a part without weights
// copies v out of y: bit for bit, with 1 and 3 KV heads and head_dim 8 and 256.
TEST_F(CudaKernels, HeadNormRopeReadsAStackedOutputAndCopiesV) {
  for (int64_t hd : {8, 256}) {
    for (int64_t kv_heads : {1, 3}) {
      const int64_t T = 7, q_heads = 6, nq = q_heads * hd, nk = kv_heads * hd, row = nq + 2 * nk;
      const std::vector<float> y_host = random_floats(T * row, 21, -3.0f, 3.0f);
      std::vector<float> q, k, v;
      for (int64_t t = 0; t < T; ++t) {
        const auto at = y_host.begin() + t * row;
        q.insert(q.end(), at, at + nq);
        k.insert(k.end(), at + nq, at + nq + nk);
        v.insert(v.end(), at + nq + nk, at + row);
      }
      Floats y(y_host), d_q(q), d_k(k), w(random_floats(hd, 22));
      Floats out_q = Floats::poisoned(T * nq), out_k = Floats::poisoned(T * nk), out_v = Floats::poisoned(T * nk);
      Floats ref_q = Floats::poisoned(T * nq), ref_k = Floats::poisoned(T * nk);
      Indices pos(false, iota(40, T));
      const cuda::HeadNormRope<float> stacked[3] = {
          {y.get(), w.get(), out_q.get(), q_heads, 1e4f, 1.0f, nullptr, row},
          {y.get() + nq, w.get(), out_k.get(), kv_heads, 1e6f, 1.0f, nullptr, row},
          {y.get() + nq + nk, nullptr, out_v.get(), kv_heads, 0, 0, nullptr, row}};
      const cuda::HeadNormRope<float> separate[2] = {{d_q.get(), w.get(), ref_q.get(), q_heads, 1e4f, 1.0f},
                                                     {d_k.get(), w.get(), ref_k.get(), kv_heads, 1e6f, 1.0f}};
      ASSERT_EQ(cudaSuccess,
                cuda::head_norm_rope<float>(stacked, 3, pos.get(), false, T, hd, 1e-6f, 1.0f, flag(), launch_));
      ASSERT_EQ(cudaSuccess,
                cuda::head_norm_rope<float>(separate, 2, pos.get(), false, T, hd, 1e-6f, 1.0f, flag(), launch_));
      EXPECT_EQ(take_flag(), 0);
      const std::string what = "head_norm_rope from a stacked output " + shape({{"hd", hd}, {"kv_heads", kv_heads}});
      EXPECT_TRUE(close(what + " q", out_q.download(), ref_q.download(), {0, 0}));
      EXPECT_TRUE(close(what + " k", out_k.download(), ref_k.download(), {0, 0}));
      EXPECT_TRUE(close(what + " v", out_v.download(), v, {0, 0}));
      EXPECT_TRUE(out_q.guard_intact() && out_k.guard_intact() && out_v.guard_intact() && y.guard_intact()) << what;
    }
  }
  Floats x(random_floats(64, 23)), yy = Floats::poisoned(64), w(random_floats(8, 24));
  Indices pos(false, {0, 1});
  const cuda::HeadNormRope<float> narrow{x.get(), w.get(), yy.get(), 2, 1e4f, 1.0f, nullptr, 15};
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::head_norm_rope<float>(&narrow, 1, pos.get(), false, 2, 8, 1e-6f, 1.0f, nullptr, launch_))
      << "rows closer together than heads * head_dim";
}

TEST_F(CudaKernels, HeadNormRopeWithAPositionScaleEqualsTheUnfusedKernels) {
  const int64_t T = 5, heads = 4, hd = 256;
  const std::vector<float> x = random_floats(T * heads * hd, 17, -2.0f, 2.0f);
  Floats d_x(x), w(random_floats(hd, 18)), fused = Floats::poisoned(x.size()), normed = Floats::poisoned(x.size()),
                                           unfused = Floats::poisoned(x.size());
  Indices pos(true, {0, 9, 300, 2047, 8191});
  const cuda::HeadNormRope<float> part{d_x.get(), w.get(), fused.get(), heads, 1e6f, 0.125f};
  ASSERT_EQ(cudaSuccess, cuda::head_norm_rope<float>(&part, 1, pos.get(), true, T, hd, 1e-6f, 1.0f, nullptr, launch_));
  ASSERT_EQ(cudaSuccess, cuda::rms_norm<float>(d_x.get(), w.get(), normed.get(), T * heads, hd, 1e-6f, 1.0f, launch_));
  ASSERT_EQ(cudaSuccess,
            cuda::rope(normed.get(), pos.get(), true, unfused.get(), T, heads, hd, 1e6f, 0.125f, nullptr, launch_));
  sync();
  EXPECT_TRUE(
      close("head_norm_rope vs rms_norm + rope, scale 0.125", fused.download(), unfused.download(), {1e-6, 1e-5}));
}

TEST_F(CudaKernels, HeadNormRopeNegativePositionPoisonsItsRowsAndBadShapesAreRejected) {
  const int64_t hd = 8, T = 2;
  Floats x(random_floats(T * hd, 15)), y = Floats::poisoned(T * hd), w(random_floats(hd, 16));
  Indices pos(false, {3, -1});
  const cuda::HeadNormRope<float> part{x.get(), w.get(), y.get(), 1, 1e4f, 1.0f};
  ASSERT_EQ(cudaSuccess, cuda::head_norm_rope<float>(&part, 1, pos.get(), false, T, hd, 1e-6f, 0.0f, flag(), launch_));
  EXPECT_EQ(take_flag(), 1);
  const std::vector<float> got = y.download();
  for (int64_t i = 0; i < hd; ++i) {
    EXPECT_TRUE(std::isfinite(got[static_cast<size_t>(i)]));
    EXPECT_TRUE(std::isnan(got[static_cast<size_t>(hd + i)]));
  }
  // Several heads and tokens: only the bad token's rows (token 5) are poisoned.
  {
    const int64_t many = 9, heads = 2;
    Floats xm(random_floats(many * heads * hd, 19)), ym = Floats::poisoned(many * heads * hd);
    Indices pm(false, {0, 1, 2, 3, 4, -7, 6, 7, 8});
    const cuda::HeadNormRope<float> pw{xm.get(), w.get(), ym.get(), heads, 1e4f, 1.0f};
    ASSERT_EQ(cudaSuccess,
              cuda::head_norm_rope<float>(&pw, 1, pm.get(), false, many, hd, 1e-6f, 0.0f, flag(), launch_));
    EXPECT_EQ(take_flag(), 1);
    const std::vector<float> out = ym.download();
    for (int64_t i = 0; i < many * heads * hd; ++i) {
      EXPECT_EQ(std::isnan(out[static_cast<size_t>(i)]), i / (heads * hd) == 5) << i;
    }
  }
  EXPECT_EQ(cudaErrorInvalidValue, cuda::head_norm_rope<float>(&part, 3, pos.get(), false, T, hd, 1e-6f, 0.0f, nullptr,
                                                               launch_));  // too many parts
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::head_norm_rope<float>(&part, 1, pos.get(), false, T, 7, 1e-6f, 0.0f, nullptr, launch_));  // odd
}

}  // namespace
}  // namespace gearbox
