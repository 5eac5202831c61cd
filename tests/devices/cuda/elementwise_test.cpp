// The CUDA elementwise kernels (add, convert, gated activation, rows, spin) against the CPU kernels
// (devices/cpu/kernels.h) as the reference; the shared helpers and conventions (poisoned outputs, sentinels,
// tolerances) are in tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h. Label
// `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

// ---- elementwise -------------------------------------------------------------------------------------------

TEST_F(CudaKernels, SpinKeepsTheStreamBusyAtLeastAsLongAsAsked) {
  // The builder's timing relies on it: events behind a spin are recorded no sooner than its
  // end. Only a lower bound is checked (a busy GPU may stretch it).
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int64_t us : {0, 50, 300}) {
    CUDA_CHECK(cudaEventRecord(start, stream_));
    CUDA_CHECK(cuda::spin(us, launch_));
    CUDA_CHECK(cudaEventRecord(stop, stream_));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    EXPECT_GE(ms * 1000.0f, 0.95f * static_cast<float>(us)) << "spin(" << us << ")";
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  EXPECT_EQ(cuda::spin(-1, launch_), cudaErrorInvalidValue);
}

TEST_F(CudaKernels, ElementwiseOpsMatchCpuAlignedAndNot) {
  using CpuOp = void (*)(const float*, const float*, float*, int64_t);
  using CudaOp = cudaError_t (*)(const float*, const float*, float*, int64_t, const cuda::Launch&);
  const struct {
    const char* name;
    CpuOp cpu;
    CudaOp gpu;
  } ops[] = {{"gelu_tanh_mul", cpu::gelu_tanh_mul, cuda::gelu_tanh_mul},
             {"silu_mul", cpu::silu_mul, cuda::silu_mul},
             {"add", cpu::add, cuda::add}};
  for (const auto& op : ops) {
    for (int64_t n : kernel_cases::elementwise_sizes()) {
      for (int lead : {0, 1, 2}) {
        const std::vector<float> a = random_floats(n + lead, 100, -6.0f, 6.0f), b = random_floats(n + lead, 101);
        Floats d_a(a), d_b(b);
        Floats out = Floats::poisoned(n + lead);
        ASSERT_EQ(cudaSuccess, op.gpu(d_a.get() + lead, d_b.get() + lead, out.get() + lead, n, launch_));
        sync();
        std::vector<float> want(static_cast<size_t>(n));
        op.cpu(a.data() + lead, b.data() + lead, want.data(), n);
        std::vector<float> got = out.download();
        got.erase(got.begin(), got.begin() + lead);
        const std::string what = std::string(op.name) + " " + shape({{"n", n}, {"lead", lead}});
        EXPECT_TRUE(close(what, got, want));
        EXPECT_TRUE(out.guard_intact()) << what;
      }
    }
  }
  // add in place (out aliases a).
  const std::vector<float> a = random_floats(1001, 102), b = random_floats(1001, 103);
  Floats d_a(a), d_b(b);
  ASSERT_EQ(cudaSuccess, cuda::add(d_a.get(), d_b.get(), d_a.get(), 1001, launch_));
  sync();
  std::vector<float> want(a.size());
  cpu::add(a.data(), b.data(), want.data(), 1001);
  EXPECT_TRUE(close("add in place", d_a.download(), want, {0, 0}));
}

TEST_F(CudaKernels, TakeLastAndBiasRows) {
  for (int64_t batch : {1, 2}) {
    for (int64_t T : {1, 5}) {
      for (int64_t F : {7, 64}) {
        const std::vector<float> x = random_floats(batch * T * F, 110);
        Floats d_x(x);
        Floats y = Floats::poisoned(batch * F);
        ASSERT_EQ(cudaSuccess, cuda::take_last(d_x.get(), y.get(), batch, T, F, launch_));
        sync();
        std::vector<float> want;
        for (int64_t b = 0; b < batch; ++b) {
          want.insert(want.end(), x.begin() + (b * T + T - 1) * F, x.begin() + (b * T + T) * F);
        }
        const std::string what = "take_last " + shape({{"batch", batch}, {"T", T}, {"F", F}});
        EXPECT_TRUE(close(what, y.download(), want, {0, 0}));
        EXPECT_TRUE(y.guard_intact()) << what;
      }
    }
  }
  const std::vector<float> y0 = random_floats(3 * 13, 111), bias = random_floats(13, 112);
  Floats d_y(y0), d_bias(bias);
  ASSERT_EQ(cudaSuccess, cuda::add_bias_rows(d_y.get(), d_bias.get(), 3, 13, launch_));
  sync();
  std::vector<float> want = y0;
  for (size_t i = 0; i < want.size(); ++i) want[i] += bias[i % 13];
  EXPECT_TRUE(close("add_bias_rows", d_y.download(), want, {0, 0}));
  EXPECT_TRUE(d_y.guard_intact());
}

// A stacked GEMM's output y [rows, sum n_i] split into its outputs, each with its bias or
// none: widths that are multiples of 4 (float4 copies) and not (the scalar path), one to
// four targets, rows 1..33, and a y one float off 16 bytes (scalar).
TEST_F(CudaKernels, SplitColumnsCopiesEachTargetsColumnsAndBias) {
  const std::vector<std::vector<int64_t>> widths = {{4}, {1024, 256, 256}, {8, 12}, {5, 3, 7, 1}, {16, 4, 8, 4}};
  for (const std::vector<int64_t>& n : widths) {
    for (int64_t rows : {1, 3, 33}) {
      for (int lead : {0, 1}) {
        int64_t total = 0;
        for (int64_t w : n) total += w;
        const std::vector<float> y_host = random_floats(lead + rows * total, 130);
        Floats y(y_host);
        std::vector<Floats> outs, biases;
        std::vector<std::vector<float>> bias_host;
        cuda::ColumnSplit split{};
        split.count = static_cast<int>(n.size());
        for (size_t i = 0; i < n.size(); ++i) {
          outs.push_back(Floats::poisoned(rows * n[i]));
          bias_host.push_back(i % 2 == 0 ? random_floats(n[i], 131 + static_cast<uint32_t>(i)) : std::vector<float>{});
          biases.emplace_back(bias_host[i].empty() ? std::vector<float>{0.0f} : bias_host[i]);
        }
        for (size_t i = 0; i < n.size(); ++i) {
          split.targets[i] = {outs[i].get(), bias_host[i].empty() ? nullptr : biases[i].get(), n[i]};
        }
        ASSERT_EQ(cudaSuccess, cuda::split_columns(y.get() + lead, rows, split, launch_));
        sync();
        int64_t first = 0;
        for (size_t i = 0; i < n.size(); ++i) {
          std::vector<float> want;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < n[i]; ++c) {
              want.push_back(y_host[static_cast<size_t>(lead + r * total + first + c)] +
                             (bias_host[i].empty() ? 0.0f : bias_host[i][static_cast<size_t>(c)]));
            }
          }
          const std::string what =
              "split_columns " +
              shape(
                  {{"rows", rows}, {"target", static_cast<int64_t>(i)}, {"n", n[i]}, {"total", total}, {"lead", lead}});
          EXPECT_TRUE(close(what, outs[i].download(), want, {0, 0}));
          EXPECT_TRUE(outs[i].guard_intact()) << what;
          first += n[i];
        }
      }
    }
  }
  Floats y(std::vector<float>(8, 1.0f)), out = Floats::poisoned(8);
  cuda::ColumnSplit none{};
  EXPECT_EQ(cudaErrorInvalidValue, cuda::split_columns(y.get(), 1, none, launch_)) << "no target";
  cuda::ColumnSplit empty{};
  empty.count = 1;
  empty.targets[0] = {out.get(), nullptr, 0};
  EXPECT_EQ(cudaErrorInvalidValue, cuda::split_columns(y.get(), 1, empty, launch_)) << "a target of no columns";
}

TEST_F(CudaKernels, ConvertRoundsToNearestEvenLikeTheHost) {
  for (int64_t n : {1, 5, 4096, 4099}) {
    for (int lead : {0, 1}) {
      std::vector<float> x = random_floats(n + lead, 120, -70000.0f, 70000.0f);
      x[static_cast<size_t>(lead)] = 1.00390625f;  // a bf16 tie: rounds to even (1.0)
      Floats d_x(x);
      DeviceBuffer<uint16_t> bf = DeviceBuffer<uint16_t>::poisoned(n + lead),
                             hf = DeviceBuffer<uint16_t>::poisoned(n + lead);
      Floats f = Floats::poisoned(n);
      ASSERT_EQ(cudaSuccess, cuda::convert_f32_to<__nv_bfloat16>(
                                 d_x.get() + lead, reinterpret_cast<__nv_bfloat16*>(bf.get()) + lead, n, launch_));
      ASSERT_EQ(cudaSuccess,
                cuda::convert_f32_to<__half>(d_x.get() + lead, reinterpret_cast<__half*>(hf.get()) + lead, n, launch_));
      ASSERT_EQ(cudaSuccess, cuda::convert_f32_to<float>(d_x.get() + lead, f.get(), n, launch_));
      sync();
      const std::vector<uint16_t> got_bf = bf.download(), got_hf = hf.download();
      size_t mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[static_cast<size_t>(i + lead)];
        const auto at = static_cast<size_t>(i + lead);
        if (got_bf[at] != internal::f32_to_bf16(v) || got_hf[at] != internal::f32_to_f16(v)) {
          if (mismatches++ == 0) {
            ADD_FAILURE() << "convert n=" << n << " lead=" << lead << ": first mismatch [" << i << "] " << v
                          << " -> bf16 " << got_bf[at] << " (host " << internal::f32_to_bf16(v) << "), f16 "
                          << got_hf[at] << " (host " << internal::f32_to_f16(v) << ")";
          }
        }
      }
      EXPECT_EQ(mismatches, 0u);
      EXPECT_TRUE(close("convert f32", f.download(), std::vector<float>(x.begin() + lead, x.end()), {0, 0}));
      EXPECT_TRUE(bf.guard_intact() && hf.guard_intact() && f.guard_intact());
    }
  }
}

TEST_F(CudaKernels, GatedActivationRowsReadsSixteenBitRowsWithAStride) {
  // The gate / up GEMMs' 16-bit outputs, as two [rows, n] matrices (ld = n) or one stacked
  // [rows, 2n] (ld = 2n, up at column n): against the CPU activation of the same rounded
  // values; the 16-bit output is the f32 output rounded, bit for bit.
  struct Case {
    int64_t rows, n, ld, up_at;  // up starts up_at elements after gate
    int lead;                    // elements before gate (1: unaligned, the scalar kernel)
  };
  const Case cases[] = {{1, 8, 8, 8, 0},          {3, 8, 16, 8, 0},      {5, 24, 48, 24, 0}, {2, 6912, 13824, 6912, 0},
                        {7, 1152, 1152, 8064, 0}, {1, 7, 7, 7, 0},       {4, 13, 26, 13, 0}, {3, 16, 40, 16, 0},
                        {2, 8, 8, 16, 1},         {129, 64, 128, 64, 0}, {0, 8, 8, 8, 0}};
  for (DataType type : {DataType::kBF16, DataType::kF16}) {
    for (cuda::GatedActivation activation : {cuda::GatedActivation::kGeluTanh, cuda::GatedActivation::kSilu}) {
      for (const Case& c : cases) {
        const int64_t span = c.lead + std::max<int64_t>(c.up_at + (c.rows - 1) * c.ld + c.n, 1);
        const std::vector<float> values = random_floats(span, 123, -5.0f, 5.0f);
        std::vector<uint16_t> bits;
        std::vector<float> rounded;
        for (float v : values) {
          bits.push_back(type == DataType::kBF16 ? internal::f32_to_bf16(v) : internal::f32_to_f16(v));
          rounded.push_back(round_to(type, v));
        }
        DeviceBuffer<uint16_t> d_in(bits), out16 = DeviceBuffer<uint16_t>::poisoned(c.rows * c.n);
        Floats out32 = Floats::poisoned(c.rows * c.n);
        const bool gelu = activation == cuda::GatedActivation::kGeluTanh;
        const std::string what =
            std::string("gated_activation_rows ") + data_type_name(type) + (gelu ? " gelu " : " silu ") +
            shape({{"rows", c.rows}, {"n", c.n}, {"ld", c.ld}, {"up_at", c.up_at}, {"lead", c.lead}});
        const auto run = [&](auto tag) {
          using W = decltype(tag);
          const W* gate = reinterpret_cast<const W*>(d_in.get()) + c.lead;
          ASSERT_EQ(cudaSuccess, cuda::gated_activation_rows(gate, gate + c.up_at, c.ld, activation, out32.get(),
                                                             c.rows, c.n, launch_))
              << what;
          ASSERT_EQ(cudaSuccess, cuda::gated_activation_rows(gate, gate + c.up_at, c.ld, activation,
                                                             reinterpret_cast<W*>(out16.get()), c.rows, c.n, launch_))
              << what;
        };
        if (type == DataType::kBF16) {
          run(__nv_bfloat16{});
        } else {
          run(__half{});
        }
        sync();
        std::vector<float> gate(static_cast<size_t>(c.rows * c.n)), up(gate.size()), want(gate.size());
        for (int64_t r = 0; r < c.rows; ++r) {
          for (int64_t i = 0; i < c.n; ++i) {
            gate[static_cast<size_t>(r * c.n + i)] = rounded[static_cast<size_t>(c.lead + r * c.ld + i)];
            up[static_cast<size_t>(r * c.n + i)] = rounded[static_cast<size_t>(c.lead + c.up_at + r * c.ld + i)];
          }
        }
        (gelu ? cpu::gelu_tanh_mul : cpu::silu_mul)(gate.data(), up.data(), want.data(), c.rows * c.n);
        const std::vector<float> got = out32.download();
        EXPECT_TRUE(close(what + " f32", got, want)) << what;
        std::vector<uint16_t> want16;
        for (float v : got)
          want16.push_back(type == DataType::kBF16 ? internal::f32_to_bf16(v) : internal::f32_to_f16(v));
        EXPECT_EQ(out16.download(), want16) << what << ": the 16-bit output is not the f32 output rounded";
        EXPECT_TRUE(out16.guard_intact() && out32.guard_intact() && d_in.guard_intact()) << what;
      }
    }
  }
  DeviceBuffer<uint16_t> x = DeviceBuffer<uint16_t>::poisoned(64);
  const auto* p = reinterpret_cast<const __nv_bfloat16*>(x.get());
  Floats y = Floats::poisoned(64);
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gated_activation_rows(p, p + 8, 7, cuda::GatedActivation::kSilu, y.get(), 2, 8, launch_))
      << "ld < n";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gated_activation_rows(p, p + 8, 8, static_cast<cuda::GatedActivation>(7), y.get(), 2, 8, launch_))
      << "unknown activation";
}

TEST_F(CudaKernels, GatedActivationToEqualsActivationThenConvert) {
  // The fused activation + conversion feeding a GEMM must write exactly the bytes of the two
  // kernels it replaces (so the engine's numbers do not depend on fusion), and the
  // activation within the CPU's f32 tolerance before rounding.
  for (cuda::GatedActivation activation : {cuda::GatedActivation::kGeluTanh, cuda::GatedActivation::kSilu}) {
    for (int64_t n : {1, 7, 4096, 4099}) {
      for (int lead : {0, 1}) {  // 1: unaligned, the scalar kernel
        const std::vector<float> gate = random_floats(n + lead, 121, -6.0f, 6.0f);
        const std::vector<float> up = random_floats(n + lead, 122, -3.0f, 3.0f);
        Floats d_gate(gate), d_up(up), product = Floats::poisoned(n);
        const bool gelu = activation == cuda::GatedActivation::kGeluTanh;
        ASSERT_EQ(cudaSuccess, (gelu ? cuda::gelu_tanh_mul : cuda::silu_mul)(d_gate.get() + lead, d_up.get() + lead,
                                                                             product.get(), n, launch_));
        DeviceBuffer<uint16_t> want_bf = DeviceBuffer<uint16_t>::poisoned(n + lead),
                               want_hf = DeviceBuffer<uint16_t>::poisoned(n + lead),
                               got_bf = DeviceBuffer<uint16_t>::poisoned(n + lead),
                               got_hf = DeviceBuffer<uint16_t>::poisoned(n + lead);
        const auto bf16 = [&](const DeviceBuffer<uint16_t>& b) {
          return reinterpret_cast<__nv_bfloat16*>(b.get()) + lead;
        };
        const auto f16 = [&](const DeviceBuffer<uint16_t>& b) { return reinterpret_cast<__half*>(b.get()) + lead; };
        ASSERT_EQ(cudaSuccess, cuda::convert_f32_to(product.get(), bf16(want_bf), n, launch_));
        ASSERT_EQ(cudaSuccess, cuda::convert_f32_to(product.get(), f16(want_hf), n, launch_));
        ASSERT_EQ(cudaSuccess, cuda::gated_activation_to(d_gate.get() + lead, d_up.get() + lead, activation,
                                                         bf16(got_bf), n, launch_));
        ASSERT_EQ(cudaSuccess, cuda::gated_activation_to(d_gate.get() + lead, d_up.get() + lead, activation,
                                                         f16(got_hf), n, launch_));
        sync();
        const std::string what =
            std::string("gated_activation_to ") + (gelu ? "gelu" : "silu") + " " + shape({{"n", n}, {"lead", lead}});
        EXPECT_EQ(got_bf.download(), want_bf.download()) << what << " bf16";
        EXPECT_EQ(got_hf.download(), want_hf.download()) << what << " f16";
        std::vector<float> cpu_product(static_cast<size_t>(n));
        (gelu ? cpu::gelu_tanh_mul : cpu::silu_mul)(gate.data() + lead, up.data() + lead, cpu_product.data(), n);
        EXPECT_TRUE(close(what + " f32 product", product.download(), cpu_product));
        EXPECT_TRUE(got_bf.guard_intact() && got_hf.guard_intact()) << what;
      }
    }
  }
  Floats x = Floats::poisoned(4);
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gated_activation_to(x.get(), x.get(), static_cast<cuda::GatedActivation>(7),
                                                             reinterpret_cast<__nv_bfloat16*>(x.get()), 4, launch_))
      << "unknown activation";
}

}  // namespace
}  // namespace gearbox
