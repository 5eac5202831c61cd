// The CUDA KV cache write kernel against the CPU kernels (devices/cpu/kernels.h) as the reference;
// the shared helpers and conventions (poisoned outputs, sentinels, tolerances) are in
// tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h.
// Label `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

TEST_F(CudaKernels, KvCacheWriteCopiesRowsAndFlagsBadPositions) {
  const int64_t max_ctx = 50;
  for (int64_t width : {7, 64, 256}) {
    for (bool with_bad : {false, true}) {
      const std::vector<int64_t> pos =
          with_bad ? std::vector<int64_t>{4, 50, 0, -1, 49} : std::vector<int64_t>{4, 0, 49};
      const auto T = static_cast<int64_t>(pos.size());
      const std::vector<float> k = random_floats(T * width, 10), v = random_floats(T * width, 11);
      const std::vector<float> kc0 = random_floats(max_ctx * width, 12), vc0 = random_floats(max_ctx * width, 13);
      Floats d_k(k), d_v(v), d_kc(kc0), d_vc(vc0);
      Indices d_pos(true, pos);
      ASSERT_EQ(cudaSuccess, cuda::kv_cache_write(d_k.get(), d_v.get(), d_pos.get(), true, T, width, d_kc.get(),
                                                  d_vc.get(), max_ctx, flag(), launch_));
      EXPECT_EQ(take_flag(), with_bad ? 1 : 0);
      std::vector<float> kc = kc0, vc = vc0;  // the rows with valid positions, written
      for (int64_t t = 0; t < T; ++t) {
        if (pos[t] < 0 || pos[t] >= max_ctx) continue;
        std::copy_n(k.begin() + t * width, width, kc.begin() + pos[t] * width);
        std::copy_n(v.begin() + t * width, width, vc.begin() + pos[t] * width);
      }
      const std::string what = "kv_cache_write " + shape({{"width", width}, {"bad", with_bad}});
      EXPECT_TRUE(close(what + " k", d_kc.download(), kc, {0, 0}));
      EXPECT_TRUE(close(what + " v", d_vc.download(), vc, {0, 0}));
      EXPECT_TRUE(d_kc.guard_intact() && d_vc.guard_intact()) << what;
    }
  }
}

}  // namespace
}  // namespace gearbox
