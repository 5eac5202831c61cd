// The CUDA embedding kernel against the CPU kernels (devices/cpu/kernels.h) as the reference;
// the shared helpers and conventions (poisoned outputs, sentinels, tolerances) are in
// tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h.
// Label `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

// ---- embedding --------------------------------------------------------------------------------------

TEST_F(CudaKernels, EmbeddingMatchesCpuForEveryWeightAndIdType) {
  const int64_t vocab = 37;
  for (DataType type : kWeightTypes) {
    for (bool ids_i64 : {false, true}) {
      for (int64_t hidden : kernel_cases::embedding_dims()) {
        const std::vector<int64_t> ids = {0, 36, 5, 5, 17};
        const auto count = static_cast<int64_t>(ids.size());
        const Weights table = make_weights(type, random_floats(vocab * hidden, 1));
        DeviceBuffer<uint8_t> d_table(table.bytes);
        Indices d_ids(ids_i64, ids);
        Floats out = Floats::poisoned(count * hidden);
        const float scale = 33.9411f;
        ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                    using W = decltype(tag);
                    return cuda::embedding<W>(d_ids.get(), ids_i64, count, weight_ptr<W>(d_table, 0), vocab, hidden,
                                              scale, out.get(), flag(), launch_);
                  }));
        std::vector<float> want(static_cast<size_t>(count * hidden));
        ASSERT_TRUE(
            cpu::embedding(ids.data(), DataType::kI64, count, table.rounded.data(), vocab, hidden, scale, want.data())
                .ok());
        const std::string what = std::string("embedding ") + data_type_name(type) + " " + shape({{"hidden", hidden}});
        EXPECT_EQ(take_flag(), 0) << what;
        EXPECT_TRUE(close(what, out.download(), want, {0, 0})) << "a scaled gather is exact";
        EXPECT_TRUE(out.guard_intact()) << what;
      }
    }
  }
}

TEST_F(CudaKernels, EmbeddingOutOfRangeIdWritesNaNAndSetsTheFlag) {
  const int64_t vocab = 10, hidden = 64;
  const Weights table = make_weights(DataType::kBF16, random_floats(vocab * hidden, 2));
  DeviceBuffer<uint8_t> d_table(table.bytes);
  for (int64_t bad : {int64_t{10}, int64_t{-1}, int64_t{1} << 40}) {
    Indices ids(true, {3, bad, 4});
    Floats out = Floats::poisoned(3 * hidden);
    ASSERT_EQ(cudaSuccess, cuda::embedding<__nv_bfloat16>(ids.get(), true, 3, weight_ptr<__nv_bfloat16>(d_table, 0),
                                                          vocab, hidden, 1.0f, out.get(), flag(), launch_));
    EXPECT_EQ(take_flag(), 1) << "id " << bad;
    const std::vector<float> got = out.download();
    EXPECT_TRUE(all_nan("bad row", got, hidden, 2 * hidden));
    EXPECT_EQ(got[0], table.rounded[3 * hidden]) << "the good rows are still written";
    EXPECT_TRUE(out.guard_intact());
  }
}

}  // namespace
}  // namespace gearbox
