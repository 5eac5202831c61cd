// The CUDA residual + norm kernels against the CPU kernels (devices/cpu/kernels.h) as the reference;
// the shared helpers and conventions (poisoned outputs, sentinels, tolerances) are in
// tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h.
// Label `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

TEST_F(CudaKernels, NormAddNormEqualsNormAddThenNorm) {
  for (DataType type : kWeightTypes) {
    for (int64_t dim : kernel_cases::residual_norm_dims()) {
      for (int64_t rows : {1, 5, 9, 40}) {  // up to 8 rows: 1024 threads a row; more: 256
        // 0: separate buffers, 1: sum = residual and y = x, 2: no next norm, 3: no post-norm
        // (a pre-norm family's add + norm)
        for (int variant : {0, 1, 2, 3}) {
          const std::vector<float> x = random_floats(rows * dim, 21, -4.0f, 4.0f);
          const std::vector<float> r = random_floats(rows * dim, 22, -8.0f, 8.0f);
          const Weights w1 = make_weights(type, random_floats(dim, 23)),
                        w2 = make_weights(type, random_floats(dim, 24));
          Floats d_x(x), d_r(r), sum = Floats::poisoned(x.size()), y = Floats::poisoned(x.size());
          DeviceBuffer<uint8_t> d_w1(w1.bytes), d_w2(w2.bytes);
          float* sum_out = variant == 1 ? d_r.get() : sum.get();
          float* y_out = variant == 1 ? d_x.get() : y.get();
          ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                      using W = decltype(tag);
                      return cuda::norm_add_norm<W>(d_x.get(), variant == 3 ? nullptr : weight_ptr<W>(d_w1, 0),
                                                    d_r.get(), sum_out, variant == 2 ? nullptr : weight_ptr<W>(d_w2, 0),
                                                    variant == 2 ? nullptr : y_out, rows, dim, 1e-6f, 1.0f, launch_);
                    }));
          sync();
          std::vector<float> normed(x), want_sum(x.size()), want_y(x.size());
          if (variant != 3) cpu::rms_norm(x.data(), w1.rounded.data(), normed.data(), rows, dim, 1e-6f, 1.0f);
          cpu::add(r.data(), normed.data(), want_sum.data(), rows * dim);
          cpu::rms_norm(want_sum.data(), w2.rounded.data(), want_y.data(), rows, dim, 1e-6f, 1.0f);
          const std::string what = std::string("norm_add_norm ") + data_type_name(type) + " " +
                                   shape({{"dim", dim}, {"rows", rows}, {"variant", variant}});
          EXPECT_TRUE(close(what + " sum", variant == 1 ? d_r.download() : sum.download(), want_sum));
          if (variant != 2) {
            EXPECT_TRUE(close(what + " y", variant == 1 ? d_x.download() : y.download(), want_y));
          } else {
            EXPECT_TRUE(std::isnan(y.download()[0])) << what << ": y untouched without a next norm";
          }
          EXPECT_TRUE(sum.guard_intact() && y.guard_intact() && d_x.guard_intact() && d_r.guard_intact()) << what;
        }
      }
    }
  }
}

// ---- KV cache write --------------------------------------------------------------------------------------

TEST_F(CudaKernels, NormAddNormToEqualsNormAddNormThenConvert) {
  // The variant feeding a GEMM writes y rounded to W: exactly the bytes of norm_add_norm
  // then convert_f32_to (so the engine's numbers do not depend on fusion), and the same sum.
  for (int64_t dim : {7, 1152, 2305, 8200}) {  // cached kernel, and the looping one beyond 2048
    for (int64_t rows : {1, 9, 40}) {
      const std::vector<float> x = random_floats(rows * dim, 31, -4.0f, 4.0f);
      const std::vector<float> r = random_floats(rows * dim, 32, -8.0f, 8.0f);
      for (DataType type : {DataType::kBF16, DataType::kF16}) {
        const bool post = rows != 9;  // 9 rows: a pre-norm family's add + norm (no post-norm)
        const Weights w1 = make_weights(type, random_floats(dim, 33)), w2 = make_weights(type, random_floats(dim, 34));
        DeviceBuffer<uint8_t> d_w1(w1.bytes), d_w2(w2.bytes);
        Floats d_x(x), d_r(r), sum = Floats::poisoned(x.size()), y = Floats::poisoned(x.size()),
                               got_sum = Floats::poisoned(x.size());
        DeviceBuffer<uint16_t> want = DeviceBuffer<uint16_t>::poisoned(rows * dim),
                               got = DeviceBuffer<uint16_t>::poisoned(rows * dim);
        ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                    using W = decltype(tag);
                    const W* g1 = post ? weight_ptr<W>(d_w1, 0) : nullptr;
                    const W* g2 = weight_ptr<W>(d_w2, 0);
                    cudaError_t err = cuda::norm_add_norm<W>(d_x.get(), g1, d_r.get(), sum.get(), g2, y.get(), rows,
                                                             dim, 1e-6f, 1.0f, launch_);
                    if (err == cudaSuccess) {
                      err = cuda::convert_f32_to(y.get(), reinterpret_cast<W*>(want.get()), rows * dim, launch_);
                    }
                    if (err == cudaSuccess) {
                      err = cuda::norm_add_norm_to<W>(d_x.get(), g1, d_r.get(), got_sum.get(), g2,
                                                      reinterpret_cast<W*>(got.get()), rows, dim, 1e-6f, 1.0f, launch_);
                    }
                    return err;
                  }));
        sync();
        const std::string what = std::string("norm_add_norm_to ") + data_type_name(type) + " " +
                                 shape({{"dim", dim}, {"rows", rows}, {"post_norm", post}});
        EXPECT_EQ(got.download(), want.download()) << what;
        EXPECT_EQ(got_sum.download(), sum.download()) << what << " sum";
        EXPECT_TRUE(got.guard_intact() && got_sum.guard_intact()) << what;
      }
    }
  }
  Floats x = Floats::poisoned(8), s = Floats::poisoned(8);
  const auto* w = reinterpret_cast<const __nv_bfloat16*>(x.get());
  auto* y = reinterpret_cast<__nv_bfloat16*>(s.get() + 4);
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::norm_add_norm_to(x.get(), w, x.get(), s.get(), w, y, -1, 4, 1e-6f, 1.0f, launch_));
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::norm_add_norm_to(x.get(), w, x.get(), s.get(), static_cast<const __nv_bfloat16*>(nullptr), y, 1, 4,
                                   1e-6f, 1.0f, launch_))
      << "no next norm";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::norm_add_norm_to(x.get(), w, x.get(), s.get(), w, static_cast<__nv_bfloat16*>(nullptr), 1, 4, 1e-6f,
                                   1.0f, launch_))
      << "no output";
}

}  // namespace
}  // namespace gearbox
