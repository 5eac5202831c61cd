// cuda_kernels_bench groups `gemm`, `qkv`, `gate_up`, `gemm_m` (cuBLASLt) and `rows`.
#include "bench_common.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "devices/cuda/gemm_cublaslt.h"
#include "devices/cuda/host_progress.h"
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/kernels/embedding.cuh"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/kernels/norm_rope.cuh"
#include "devices/cuda/kernels/prefill_attention.cuh"
#include "devices/cuda/kernels/prefill_attention_mma.cuh"
#include "devices/cuda/kernels/residual_norm.cuh"

namespace gearbox::kernel_bench {

// ---- cuBLASLt GEMM ----------------------------------------------------------------------------------

void bench_gemm(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  gearbox::Result<std::unique_ptr<cuda::CublasLtGemm>> gemm = cuda::CublasLtGemm::create();
  check_status(gemm.status(), "CublasLtGemm::create");
  std::printf("\n== cuBLASLt GEMM, bf16 weights, f32 x/y (%s; times include the x -> bf16 conversion) ==\n",
              cuda::CublasLtGemm::version().c_str());
  for (int64_t M : kernel_cases::kGemmTimedRows) {
    for (const Linear& l : timed_linears()) {
      const int64_t w_bytes = l.N * l.K * 2;
      const int copies = copies_for(w_bytes);
      DeviceMemory w(static_cast<size_t>(w_bytes) * copies), x(static_cast<size_t>(M * l.K) * 4),
          y(static_cast<size_t>(M * l.N) * 4),
          scratch(static_cast<size_t>(cuda::CublasLtGemm::scratch_bytes(M, l.K, DataType::kBF16)));
      fill_bf16(w.as<__nv_bfloat16>(), l.N * l.K * copies, 8);
      fill_f32(x.as<float>(), M * l.K, 9);
      std::vector<cublasLtMatmulHeuristicResult_t> algos;
      check_status((*gemm)->heuristics(M, l.N, l.K, DataType::kBF16, 8, &algos), "heuristics");
      const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(l.N) * static_cast<double>(l.K);
      Timing best;
      size_t best_index = 0;
      for (size_t a = 0; a < algos.size(); ++a) {
        const Timing t = time_launches(stream, copies, [&](int i) {
          check_status((*gemm)->run(&algos[a].algo, x.as<float>(), w.as<__nv_bfloat16>() + (i % copies) * l.N * l.K,
                                    DataType::kBF16, nullptr, y.as<float>(), M, l.N, l.K, scratch.ptr, on),
                       "run");
        });
        if (a == 0) {
          print("gemm M=" + std::to_string(M) + " " + l.name + " heuristic #0", t, flops, 1e6, "TFLOP/s");
        }
        if (a == 0 || t.median_us < best.median_us) {
          best = t;
          best_index = a;
        }
      }
      print("gemm M=" + std::to_string(M) + " " + l.name + " best of " + std::to_string(algos.size()) + " (#" +
                std::to_string(best_index) + ")",
            best, flops, 1e6, "TFLOP/s");
    }
  }
}

/// The fastest of `algos`: each timed over launch(algo, i), i the launch's index.
cublasLtMatmulAlgo_t fastest(cudaStream_t stream, int copies, const std::vector<cublasLtMatmulHeuristicResult_t>& algos,
                             const std::function<void(const cublasLtMatmulAlgo_t&, int)>& launch) {
  cublasLtMatmulAlgo_t best{};
  double best_us = 1e30;
  for (const auto& a : algos) {
    const Timing t = time_launches(stream, copies, [&](int i) { launch(a.algo, i); });
    if (t.median_us < best_us) {
      best_us = t.median_us;
      best = a.algo;
    }
  }
  return best;
}

/// A fused QKV linear (Gemma-3-1B: q 1024, k 256, v 256 rows, K = 1152) as the engine runs it
/// (x converted once, one GEMM per output, each with its best heuristic of 8) against one GEMM
/// over the three weights stored one after another (1536 rows): what merging them would save.
void bench_qkv_merge(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  gearbox::Result<std::unique_ptr<cuda::CublasLtGemm>> gemm = cuda::CublasLtGemm::create();
  check_status(gemm.status(), "CublasLtGemm::create");
  std::printf("\n== fused QKV linear on cuBLASLt: three GEMMs vs one over contiguous weights ==\n");
  constexpr int64_t K = 1152;
  constexpr int64_t kRows[3] = {1024, 256, 256};
  constexpr int64_t kTotal = 1536;
  const int copies = copies_for(kTotal * K * 2);
  DeviceMemory w(static_cast<size_t>(kTotal * K * 2) * copies);
  fill_bf16(w.as<__nv_bfloat16>(), kTotal * K * copies, 8);
  for (int64_t M : {128, 512}) {
    DeviceMemory x(static_cast<size_t>(M * K) * 4), y(static_cast<size_t>(M * kTotal) * 4),
        scratch(static_cast<size_t>(cuda::CublasLtGemm::scratch_bytes(M, K, DataType::kBF16)));
    fill_f32(x.as<float>(), M * K, 9);
    const auto best_algo = [&](int64_t N, int64_t rows_offset) {
      std::vector<cublasLtMatmulHeuristicResult_t> algos;
      check_status((*gemm)->heuristics(M, N, K, DataType::kBF16, 8, &algos), "heuristics");
      return fastest(stream, copies, algos, [&](const cublasLtMatmulAlgo_t& algo, int i) {
        check_status((*gemm)->run_converted(&algo, scratch.ptr,
                                            w.as<__nv_bfloat16>() + ((i % copies) * kTotal + rows_offset) * K,
                                            DataType::kBF16, nullptr, y.as<float>(), M, N, K, on),
                     "run_converted");
      });
    };
    const cublasLtMatmulAlgo_t q = best_algo(kRows[0], 0), kv = best_algo(kRows[1], kRows[0]),
                               merged = best_algo(kTotal, 0);
    const double flops = 2.0 * static_cast<double>(M * kTotal * K);
    const Timing three = time_launches(stream, copies, [&](int i) {
      check_status(cuda::CublasLtGemm::convert_input(x.as<float>(), DataType::kBF16, M, K, scratch.ptr, on), "convert");
      int64_t row = 0;
      for (int o = 0; o < 3; ++o) {
        check_status((*gemm)->run_converted(o == 0 ? &q : &kv, scratch.ptr,
                                            w.as<__nv_bfloat16>() + ((i % copies) * kTotal + row) * K, DataType::kBF16,
                                            nullptr, y.as<float>() + M * row, M, kRows[o], K, on),
                     "run_converted");
        row += kRows[o];
      }
    });
    print("qkv M=" + std::to_string(M) + ": conversion + three GEMMs", three, flops, 1e6, "TFLOP/s");
    const Timing one = time_launches(stream, copies, [&](int i) {
      check_status(cuda::CublasLtGemm::convert_input(x.as<float>(), DataType::kBF16, M, K, scratch.ptr, on), "convert");
      check_status((*gemm)->run_converted(&merged, scratch.ptr, w.as<__nv_bfloat16>() + (i % copies) * kTotal * K,
                                          DataType::kBF16, nullptr, y.as<float>(), M, kTotal, K, on),
                   "run_converted");
    });
    print("qkv M=" + std::to_string(M) + ": conversion + one GEMM of 1536 rows", one, flops, 1e6, "TFLOP/s");
  }
}

/// A prefill's gated MLP front (Gemma-3-1B: gate and up 6912 rows each, K = 1152, x already
/// converted) as the engine ran it before kernels 8 (a GEMM per output writing f32, then the
/// activation reading f32 and writing the down GEMM's bf16 input) against the GEMMs writing
/// bf16 (one per output, or one over the stacked weights) and the activation reading bf16.
/// Each GEMM takes its best of 8 heuristics for its output type.
void bench_gate_up(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  gearbox::Result<std::unique_ptr<cuda::CublasLtGemm>> gemm = cuda::CublasLtGemm::create();
  check_status(gemm.status(), "CublasLtGemm::create");
  std::printf("\n== gated MLP front on cuBLASLt: f32 vs bf16 gate / up outputs ==\n");
  constexpr int64_t K = 1152, N = 6912;
  const int copies = copies_for(2 * N * K * 2);
  DeviceMemory w(static_cast<size_t>(2 * N * K * 2) * copies);
  fill_bf16(w.as<__nv_bfloat16>(), 2 * N * K * copies, 8);
  const auto weights = [&](int i, int64_t o) { return w.as<__nv_bfloat16>() + ((i % copies) * 2 + o) * N * K; };
  for (int64_t M : {128, 512}) {
    DeviceMemory x(static_cast<size_t>(M * K) * 2), y(static_cast<size_t>(M * 2 * N) * 4),
        act(static_cast<size_t>(M * N) * 2);
    CHECK(cudaMemset(x.ptr, 0x3c, static_cast<size_t>(M * K) * 2));  // bf16 ~0.011
    const auto best_algo = [&](int64_t n, DataType out) {
      std::vector<cublasLtMatmulHeuristicResult_t> algos;
      check_status((*gemm)->heuristics(M, n, K, DataType::kBF16, 8, &algos, out), "heuristics");
      return fastest(stream, copies, algos, [&](const cublasLtMatmulAlgo_t& algo, int i) {
        check_status(out == DataType::kF32 ? (*gemm)->run_converted(&algo, x.ptr, weights(i, 0), DataType::kBF16,
                                                                    nullptr, y.as<float>(), M, n, K, on)
                                           : (*gemm)->run_converted_rounded(&algo, x.ptr, weights(i, 0),
                                                                            DataType::kBF16, y.ptr, M, n, K, on),
                     "gemm");
      });
    };
    const cublasLtMatmulAlgo_t f32 = best_algo(N, DataType::kF32), rounded = best_algo(N, DataType::kBF16),
                               stacked = best_algo(2 * N, DataType::kBF16);
    const double flops = 2.0 * static_cast<double>(M * 2 * N * K);
    auto* out = act.as<__nv_bfloat16>();
    const std::string name = "gate/up M=" + std::to_string(M) + ": ";
    const Timing before = time_launches(stream, copies, [&](int i) {
      for (int64_t o = 0; o < 2; ++o) {
        check_status((*gemm)->run_converted(&f32, x.ptr, weights(i, o), DataType::kBF16, nullptr,
                                            y.as<float>() + o * M * N, M, N, K, on),
                     "run_converted");
      }
      CHECK(cuda::gated_activation_to(y.as<float>(), y.as<float>() + M * N, cuda::GatedActivation::kGeluTanh, out,
                                      M * N, on));
    });
    print(name + "two f32 GEMMs + activation", before, flops, 1e6, "TFLOP/s");
    const auto* y16 = static_cast<const __nv_bfloat16*>(y.ptr);
    const Timing two = time_launches(stream, copies, [&](int i) {
      for (int64_t o = 0; o < 2; ++o) {
        check_status((*gemm)->run_converted_rounded(&rounded, x.ptr, weights(i, o), DataType::kBF16,
                                                    y.as<__nv_bfloat16>() + o * M * N, M, N, K, on),
                     "run_converted_rounded");
      }
      CHECK(cuda::gated_activation_rows(y16, y16 + M * N, N, cuda::GatedActivation::kGeluTanh, out, M, N, on));
    });
    print(name + "two bf16 GEMMs + activation", two, flops, 1e6, "TFLOP/s");
    const Timing one = time_launches(stream, copies, [&](int i) {
      check_status(
          (*gemm)->run_converted_rounded(&stacked, x.ptr, weights(i, 0), DataType::kBF16, y.ptr, M, 2 * N, K, on),
          "run_converted_rounded");
      CHECK(cuda::gated_activation_rows(y16, y16 + N, 2 * N, cuda::GatedActivation::kGeluTanh, out, M, N, on));
    });
    print(name + "one stacked bf16 GEMM + activation", one, flops, 1e6, "TFLOP/s");
  }
}

/// The prefill profile's linears as the engine runs them on cuBLASLt (x already converted),
/// at several M: each of the 8 heuristics cuBLASLt offers at that M timed. A cuBLASLt tactic
/// names a heuristic index, chosen by timing at the profile's opt M (128 for the Gemma
/// builder's prefill profile) and used at every M the profile takes; the table says what
/// that index costs at other M against the best index there.
void bench_gemm_sweep(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  gearbox::Result<std::unique_ptr<cuda::CublasLtGemm>> gemm = cuda::CublasLtGemm::create();
  check_status(gemm.status(), "CublasLtGemm::create");
  struct Shape {
    const char* name;
    int64_t N, K;
    DataType out;
  };
  constexpr Shape kShapes[] = {{"qkv (stacked)", 1536, 1152, DataType::kF32},
                               {"o_proj", 1152, 1024, DataType::kF32},
                               {"gate_up (stacked, bf16 out)", 13824, 1152, DataType::kBF16},
                               {"down_proj", 1152, 6912, DataType::kF32}};
  constexpr int kTactics = 4;  // heuristics a tactic may name (cublaslt, _h1 .. _h3)
  std::printf(
      "\n== cuBLASLt heuristics by M (us; * the fastest of the first %d at M, ! the index the fastest "
      "at M=128 names) ==\n",
      kTactics);
  for (const Shape& sh : kShapes) {
    const int64_t w_bytes = sh.N * sh.K * 2;
    const int copies = copies_for(w_bytes);
    DeviceMemory w(static_cast<size_t>(w_bytes) * copies);
    fill_bf16(w.as<__nv_bfloat16>(), sh.N * sh.K * copies, 8);
    size_t index_at_128 = 0;
    for (int64_t M : {128, 256, 512, 1024, 2048}) {
      DeviceMemory x(static_cast<size_t>(M * sh.K) * 2), y(static_cast<size_t>(M * sh.N) * 4);
      fill_bf16(x.as<__nv_bfloat16>(), M * sh.K, 9);
      std::vector<cublasLtMatmulHeuristicResult_t> algos;
      check_status((*gemm)->heuristics(M, sh.N, sh.K, DataType::kBF16, 8, &algos, sh.out), "heuristics");
      std::vector<double> us;
      for (const auto& a : algos) {
        us.push_back(time_launches(stream, copies, [&](int i) {
                       const auto* wi = w.as<__nv_bfloat16>() + (i % copies) * sh.N * sh.K;
                       check_status(sh.out == DataType::kF32
                                        ? (*gemm)->run_converted(&a.algo, x.ptr, wi, DataType::kBF16, nullptr,
                                                                 y.as<float>(), M, sh.N, sh.K, on)
                                        : (*gemm)->run_converted_rounded(&a.algo, x.ptr, wi, DataType::kBF16, y.ptr, M,
                                                                         sh.N, sh.K, on),
                                    "gemm");
                     }).median_us);
      }
      const auto first = std::min<size_t>(kTactics, us.size());
      const size_t best4 = static_cast<size_t>(std::min_element(us.begin(), us.begin() + first) - us.begin());
      const size_t best = static_cast<size_t>(std::min_element(us.begin(), us.end()) - us.begin());
      if (M == 128) index_at_128 = best4;
      std::printf("%-28s M=%-5lld", sh.name, static_cast<long long>(M));
      for (size_t a = 0; a < us.size(); ++a) {
        std::printf(" %8.2f%s%s", us[a], a == best4 ? "*" : " ", a == index_at_128 ? "!" : " ");
      }
      const double flops = 2.0 * static_cast<double>(M * sh.N * sh.K);
      std::printf("  | best of 8 #%zu %.1f TFLOP/s; the M=128 index costs +%.1f%%\n", best, flops / (us[best] * 1e6),
                  index_at_128 < us.size() ? 100.0 * (us[index_at_128] / us[best4] - 1.0) : 0.0);
    }
  }
}

/// The fused row kernels at the 1B shape (hidden 1152; 4 q heads, 1 KV head of 256, read
/// from a stacked QKV output): norm_add_norm_to (the prefill form, y in bf16) and
/// head_norm_rope, at decode's 1 row and prefill's 128 and 512.
void bench_rows(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== fused row kernels, 1B shape ==\n");
  constexpr int64_t H = 1152, hd = 256, q_heads = 4, row = (q_heads + 2) * hd;
  DeviceMemory w(H * 2 * 2), inv_freq(hd / 2 * 4), positions(2048 * 8);
  fill_bf16(w.as<__nv_bfloat16>(), 2 * H, 3);
  std::vector<float> freq;
  for (int64_t i = 0; i < hd / 2; ++i) freq.push_back(std::pow(10000.0f, -2.0f * static_cast<float>(i) / hd));
  CHECK(cudaMemcpy(inv_freq.ptr, freq.data(), freq.size() * 4, cudaMemcpyHostToDevice));
  std::vector<int64_t> pos(2048);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i);
  CHECK(cudaMemcpy(positions.ptr, pos.data(), pos.size() * 8, cudaMemcpyHostToDevice));
  const auto* g1 = w.as<__nv_bfloat16>();
  for (int64_t T : {1, 128, 512}) {
    const int copies = copies_for(T * H * 4 * 3);
    DeviceMemory x(static_cast<size_t>(T * H * 4) * copies), r(static_cast<size_t>(T * H * 4) * copies),
        y(static_cast<size_t>(T * H * 2) * copies), qkv(static_cast<size_t>(T * row * 4) * copies),
        out(static_cast<size_t>(T * row * 4) * copies);
    fill_f32(x.as<float>(), T * H * copies, 4);
    fill_f32(r.as<float>(), T * H * copies, 5);
    fill_f32(qkv.as<float>(), T * row * copies, 6);
    const double bytes = static_cast<double>(T * H) * (4 + 4 + 4 + 2);
    const Timing nan = time_launches(stream, copies, [&](int i) {
      CHECK(cuda::norm_add_norm_to(x.as<float>() + i * T * H, g1, r.as<float>() + i * T * H, r.as<float>() + i * T * H,
                                   g1 + H, y.as<__nv_bfloat16>() + i * T * H, T, H, 1e-6f, 1.0f, on));
    });
    print("norm_add_norm_to T=" + std::to_string(T), nan, bytes, 1e3, "GB/s");
    const Timing hnr = time_launches(stream, copies, [&](int i) {
      float* src = qkv.as<float>() + i * T * row;
      float* dst = out.as<float>() + i * T * row;
      const cuda::HeadNormRope<__nv_bfloat16> parts[3] = {
          {src, g1, dst, q_heads, 1e4f, 1.0f, inv_freq.as<float>(), row},
          {src + q_heads * hd, g1 + hd, dst + T * q_heads * hd, 1, 1e4f, 1.0f, inv_freq.as<float>(), row},
          {src + (q_heads + 1) * hd, nullptr, dst + T * (q_heads + 1) * hd, 1, 0, 0, nullptr, row}};
      CHECK(cuda::head_norm_rope(parts, 3, positions.ptr, true, T, hd, 1e-6f, 1.0f, nullptr, on));
    });
    print("head_norm_rope (q, k, v copied) T=" + std::to_string(T), hnr, static_cast<double>(T * row) * 8, 1e3, "GB/s");
  }
}

}  // namespace gearbox::kernel_bench
