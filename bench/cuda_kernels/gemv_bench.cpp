// cuda_kernels_bench groups `gemv` (the timed linears of the case table, per geometry, and the
// fused forms of a decode layer) and `host_out` (the logits into page-locked host memory).
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

// ---- gemv -------------------------------------------------------------------------------------

/// One timed linear's operands: `copies` of its bf16 weights (so that the timed launches
/// stream them from DRAM), x [M, K] and y [M, N], filled.
struct LinearOperands {
  int64_t M, N, K;
  int copies;
  DeviceMemory w, x, y;
  LinearOperands(int64_t m, const Linear& l)
      : M(m),
        N(l.N),
        K(l.K),
        copies(copies_for(l.N * l.K * 2)),
        w(static_cast<size_t>(l.N * l.K * 2) * copies),
        x(static_cast<size_t>(m * l.K) * 4),
        y(static_cast<size_t>(m * l.N) * 4) {
    fill_bf16(w.as<__nv_bfloat16>(), N * K * copies, 1);
    fill_f32(x.as<float>(), M * K, 2);
  }
  /// Launch i's copy of the weights.
  const __nv_bfloat16* weights(int i) const { return w.as<__nv_bfloat16>() + (i % copies) * N * K; }
  /// The bytes a launch moves: weights, x and y.
  double bytes() const { return static_cast<double>(N * K * 2 + M * K * 4 + M * N * 4); }
};

void bench_gemv(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== gemv, bf16 weights, f32 x/y (bytes: weights + x + y), per geometry (rows, unroll) ==\n");
  for (int64_t M : kernel_cases::kGemvTimedRows) {
    for (const Linear& l : timed_linears()) {
      if (M > 1 && l.N == kernel_cases::kGemma3_1B.vocab) continue;  // lm_head at M = 1 only
      const LinearOperands o(M, l);
      for (const cuda::GemvGeometry g : geometries(M)) {
        const Timing t = time_launches(stream, o.copies, [&](int i) {
          CHECK(cuda::gemv<__nv_bfloat16>(o.x.as<float>(), o.weights(i), nullptr, o.y.as<float>(), M, l.N, l.K, on, g));
        });
        print("gemv M=" + std::to_string(M) + " " + geometry_name(g) + " " + l.name + " " + std::to_string(l.N) + "x" +
                  std::to_string(l.K),
              t, o.bytes(), 1e3, "GB/s");
      }
    }
  }
  // The tensor-core GEMV at the same linears, the lm_head at every row count: where it takes
  // over from the SIMT GEMV (above) and from cuBLASLt (gemm group) as rows grow.
  std::printf("\n== gemv_mma (tensor cores), bf16 weights, f32 x/y (bytes: weights + x + y) ==\n");
  for (int64_t M : kernel_cases::kGemvMmaTimedRows) {
    for (const Linear& l : timed_linears()) {
      const LinearOperands o(M, l);
      const Timing t = time_launches(stream, o.copies, [&](int i) {
        const cuda::GemvTarget<__nv_bfloat16> target{o.weights(i), nullptr, o.y.as<float>(), l.N};
        CHECK(cuda::gemv_mma_multi(o.x.as<float>(), &target, 1, M, l.K, on));
      });
      print("gemv_mma M=" + std::to_string(M) + " " + l.name + " " + std::to_string(l.N) + "x" + std::to_string(l.K), t,
            o.bytes(), 1e3, "GB/s");
    }
    // gate + up + GELU of the 1B (2 x 6912 x 1152), as a batched decode runs it.
    const int64_t N = kernel_cases::kGemma3_1B.intermediate, K = kernel_cases::kGemma3_1B.hidden;
    const int copies = copies_for(2 * N * K * 2);
    DeviceMemory w(static_cast<size_t>(2 * N * K * 2) * copies), x(static_cast<size_t>(M * K) * 4),
        y(static_cast<size_t>(M * N) * 4);
    fill_bf16(w.as<__nv_bfloat16>(), 2 * N * K * copies, 3);
    fill_f32(x.as<float>(), M * K, 4);
    const auto gated = [&](bool mma) {
      return time_launches(stream, copies, [&](int i) {
        const __nv_bfloat16* gate = w.as<__nv_bfloat16>() + (i % copies) * 2 * N * K;
        if (mma) {
          CHECK(cuda::gemv_mma_gated(x.as<float>(), gate, gate + N * K, nullptr, nullptr,
                                     cuda::GatedActivation::kGeluTanh, y.as<float>(), M, N, K, on));
        } else {
          CHECK(cuda::gemv_gated<__nv_bfloat16>(x.as<float>(), gate, gate + N * K, nullptr, nullptr,
                                                cuda::GatedActivation::kGeluTanh, y.as<float>(), M, N, K, on));
        }
      });
    };
    const std::string shape = " M=" + std::to_string(M) + " N=6912 K=1152";
    if (M <= cuda::kGemvMaxRows) print("gemv_gated" + shape, gated(false), 2.0 * N * K * 2, 1e3, "GB/s");
    print("gemv_mma_gated" + shape, gated(true), 2.0 * N * K * 2, 1e3, "GB/s");
  }
  // Fused launches of one decode layer: QKV (1024 + 256 + 256) and gate + up (2 x 6912), and
  // the gated form of the latter (gate + up + GELU, as decode runs it).
  const int64_t K = 1152;
  for (const std::vector<int64_t>& ns : {std::vector<int64_t>{1024, 256, 256}, std::vector<int64_t>{6912, 6912}}) {
    int64_t total_n = 0;
    for (int64_t n : ns) total_n += n;
    const int copies = copies_for(total_n * K * 2);
    DeviceMemory w(static_cast<size_t>(total_n * K * 2) * copies), x(static_cast<size_t>(K) * 4),
        y(static_cast<size_t>(total_n) * 4);
    fill_bf16(w.as<__nv_bfloat16>(), total_n * K * copies, 3);
    fill_f32(x.as<float>(), K, 4);
    for (const cuda::GemvGeometry g : geometries(1)) {
      const Timing t = time_launches(stream, copies, [&](int i) {
        cuda::GemvTarget<__nv_bfloat16> targets[cuda::kGemvMaxTargets];
        int64_t row = 0;
        for (size_t j = 0; j < ns.size(); ++j) {
          targets[j] = {w.as<__nv_bfloat16>() + ((i % copies) * total_n + row) * K, nullptr, y.as<float>() + row,
                        ns[j]};
          row += ns[j];
        }
        CHECK(cuda::gemv_multi<__nv_bfloat16>(x.as<float>(), targets, static_cast<int>(ns.size()), 1, K, on, g));
      });
      std::string name = "gemv_multi M=1 " + geometry_name(g) + " N=";
      for (size_t j = 0; j < ns.size(); ++j) name += (j ? "+" : "") + std::to_string(ns[j]);
      name += " K=1152";
      print(name, t, static_cast<double>(total_n * K * 2), 1e3, "GB/s");
      if (ns.size() != 2) continue;
      const Timing tg = time_launches(stream, copies, [&](int i) {
        const __nv_bfloat16* gate = w.as<__nv_bfloat16>() + (i % copies) * total_n * K;
        CHECK(cuda::gemv_gated<__nv_bfloat16>(x.as<float>(), gate, gate + ns[0] * K, nullptr, nullptr,
                                              cuda::GatedActivation::kGeluTanh, y.as<float>(), 1, ns[0], K, on, g));
      });
      print("gemv_gated M=1 " + geometry_name(g) + " N=6912 K=1152", tg, static_cast<double>(total_n * K * 2), 1e3,
            "GB/s");
    }
  }
}

/// The median of `runs` host-clock timings of `call`, in microseconds.
double host_median_us(int runs, const std::function<void(int)>& call) {
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call(i);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(us.begin(), us.begin() + runs / 2, us.end());
  return us[static_cast<size_t>(runs / 2)];
}

/// The 1B's logits (lm_head 262144 x 1152, one row) brought to page-locked host memory: into
/// device memory and copied after (how a host output goes when a cuBLASLt GEMM writes it), or
/// stored there by the GEMV itself (cuda::writes_output_to_host), per geometry; then
/// to pageable memory (a session's Tensor), by the host's clock: copied after the launch, or
/// on as the GEMV's progress slots say it lands (GemvProgress, host_progress.h).
void bench_host_out(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== the lm_head's logits into page-locked host memory, bf16, M = 1 (bytes: weights) ==\n");
  const int64_t N = 262144, K = 1152, w_bytes = N * K * 2;
  const int copies = copies_for(w_bytes);
  DeviceMemory w(static_cast<size_t>(w_bytes) * copies), x(static_cast<size_t>(K) * 4), y(static_cast<size_t>(N) * 4);
  fill_bf16(w.as<__nv_bfloat16>(), N * K * copies, 1);
  fill_f32(x.as<float>(), K, 2);
  float* host = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), static_cast<size_t>(N) * 4, cudaHostAllocMapped));
  constexpr int kSlots = 1024;
  uint32_t* slots = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&slots), kSlots * 4, cudaHostAllocMapped));
  std::memset(slots, 0, kSlots * 4);
  for (const cuda::GemvGeometry g : geometries(1)) {
    const auto launch = [&](int i, float* out) {
      CHECK(cuda::gemv<__nv_bfloat16>(x.as<float>(), w.as<__nv_bfloat16>() + (i % copies) * N * K, nullptr, out, 1, N,
                                      K, on, g));
    };
    const std::string name = "lm_head " + geometry_name(g);
    print(name + " into device memory", time_launches(stream, copies, [&](int i) { launch(i, y.as<float>()); }),
          static_cast<double>(w_bytes), 1e3, "GB/s");
    print(name + " + copy to host",
          time_launches(stream, copies,
                        [&](int i) {
                          launch(i, y.as<float>());
                          CHECK(cudaMemcpyAsync(host, y.as<float>(), static_cast<size_t>(N) * 4, cudaMemcpyDeviceToHost,
                                                stream));
                        }),
          static_cast<double>(w_bytes), 1e3, "GB/s");
    print(name + " storing to host", time_launches(stream, copies, [&](int i) { launch(i, host); }),
          static_cast<double>(w_bytes), 1e3, "GB/s");
    for (const int every : {1, 4, 8, 16}) {
      print(
          name + " storing to host, progress every " + std::to_string(every),
          time_launches(
              stream, copies,
              [&](int i) {
                const cuda::GemvTarget<__nv_bfloat16> t{w.as<__nv_bfloat16>() + (i % copies) * N * K, nullptr, host, N};
                CHECK(cuda::gemv_multi<__nv_bfloat16>(x.as<float>(), &t, 1, 1, K, on, g, 0, nullptr,
                                                      {slots, kSlots, every}));
              }),
          static_cast<double>(w_bytes), 1e3, "GB/s");
    }
  }
  // To pageable memory, launch to return (host clock, median of 60 alternating rounds).
  std::vector<float> pageable(static_cast<size_t>(N), 1.0f);
  cudaEvent_t done = nullptr;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  for (const auto& [g, every] : {std::pair{cuda::GemvGeometry{4, 4}, 4}, std::pair{cuda::GemvGeometry{4, 4}, 8},
                                 std::pair{cuda::GemvGeometry{4, 4}, 16}, std::pair{cuda::GemvGeometry{8, 2}, 8}}) {
    const auto launch = [&](int i, bool progress) {
      const cuda::GemvTarget<__nv_bfloat16> t{w.as<__nv_bfloat16>() + (i % copies) * N * K, nullptr, host, N};
      CHECK(
          cuda::gemv_multi<__nv_bfloat16>(x.as<float>(), &t, 1, 1, K, on, g, 0, nullptr,
                                          progress ? cuda::GemvProgress{slots, kSlots, every} : cuda::GemvProgress{}));
    };
    const auto stored = [&](int i) {
      launch(i, false);
      CHECK(cudaStreamSynchronize(stream));
    };
    const auto copied_after = [&](int i) {
      stored(i);
      std::memcpy(pageable.data(), host, static_cast<size_t>(N) * 4);
    };
    const auto copied_on = [&](int i) {
      std::memset(slots, 0, kSlots * 4);
      launch(i, true);
      CHECK(cudaEventRecord(done, stream));
      internal::LandingCopy l{slots, kSlots, host, pageable.data(), N * 4};
      for (;;) {
        const bool moved = internal::copy_landed(l);
        if (l.copied == l.bytes || (!moved && cudaEventQuery(done) != cudaErrorNotReady)) break;
        if (!moved) internal::spin_pause();
      }
      CHECK(cudaStreamSynchronize(stream));
      std::memcpy(pageable.data() + l.copied / 4, host + l.copied / 4, static_cast<size_t>(l.bytes - l.copied));
    };
    for (int i = 0; i < 4; ++i) copied_on(i);  // warm-up
    double a[3] = {0, 0, 0};
    for (int round = 0; round < 3; ++round) {
      a[0] += host_median_us(20, stored) / 3;
      a[1] += host_median_us(20, copied_after) / 3;
      a[2] += host_median_us(20, copied_on) / 3;
    }
    std::printf(
        "lm_head %s to pageable memory, launch to return (host clock): into page-locked only %.1f us, "
        "then a copy %.1f us, copied on as it lands (progress every %d units) %.1f us\n",
        geometry_name(g).c_str(), a[0], a[1], every, a[2]);
  }
  CHECK(cudaEventDestroy(done));
  CHECK(cudaFreeHost(slots));
  CHECK(cudaFreeHost(host));
}

}  // namespace gearbox::kernel_bench
