// Microbenchmark of the CUDA device's hot kernels at Gemma-3-1B shapes (bf16 weights):
// decode gemv (M = 1, fused forms too), flash-decoding attention and the cuBLASLt GEMM.
//
// Each measurement captures max(30, copies) launches into a CUDA graph, each launch between
// two event records, so the per-launch times carry no host launch gaps; the graph runs once
// to warm up and once to measure, and the median and spread of the per-launch times are
// printed with the achieved bandwidth (or FLOP/s). Weights (and KV caches) rotate over
// enough copies (>= 240 MB together, 4x the 60 MB L2) that every launch reads its data
// from DRAM, as in a real decode step. The event nodes themselves cost ~3 us per launch
// (the "floor", measured first with a 1-element add): rates are printed both as measured
// and net of that floor, which is closer to what a launch costs inside a decode graph.
//
//   cuda_kernels_bench            # all groups
//   cuda_kernels_bench gemv       # one group: gemv | host_out | attention | prefill | gemm | qkv |
//                                 #            gate_up | rows | graph_launch |
//                                 #            input_copy | layer | stream
//   cuda_kernels_bench gemm_m     # cuBLASLt's heuristics by M at the prefill shapes (not in "all")
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
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/kernels/embedding.cuh"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/kernels/norm_rope.cuh"
#include "devices/cuda/kernels/prefill_attention.cuh"
#include "devices/cuda/kernels/prefill_attention_mma.cuh"
#include "devices/cuda/kernels/residual_norm.cuh"
#include "devices/cuda/host_progress.h"

namespace {

using gearbox::DataType;
namespace cuda = gearbox::cuda;
namespace internal = gearbox::internal;

constexpr int kMinReps = 30;                          // timed launches per measurement, at least
constexpr int64_t kRotateBytes = int64_t{240} << 20;  // > 4x the H200's 60 MB L2

void check(cudaError_t err, const char* call, int line) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "cuda_kernels_bench.cpp:%d: %s failed: %s\n", line, call, cudaGetErrorString(err));
    std::exit(1);
  }
}
#define CHECK(call) check((call), #call, __LINE__)

void check_status(const gearbox::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}

/// A device allocation freed at scope exit.
struct DeviceMemory {
  explicit DeviceMemory(size_t bytes) { CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 16))); }
  ~DeviceMemory() { (void)cudaFree(ptr); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  void* ptr = nullptr;
};

/// Fills n bf16 values in [-1, 1) (the bench needs plausible magnitudes, not exact data).
void fill_bf16(__nv_bfloat16* dst, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__nv_bfloat16> host(static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 22)));
  for (auto& v : host) v = __float2bfloat16(dist(rng));
  for (int64_t off = 0; off < n; off += static_cast<int64_t>(host.size())) {
    const auto count = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(host.size()), n - off));
    CHECK(cudaMemcpy(dst + off, host.data(), count * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  }
}

void fill_f32(float* dst, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> host(static_cast<size_t>(n));
  for (float& v : host) v = dist(rng);
  CHECK(cudaMemcpy(dst, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
}

int copies_for(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((kRotateBytes + bytes - 1) / std::max<int64_t>(bytes, 1), 4, 512));
}

struct Timing {
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
};

/// Times launch(i) for i < max(kMinReps, copies) inside one captured graph, each launch
/// between two events; launch(i) is to read copy i % copies of its data.
Timing time_launches(cudaStream_t stream, int copies, const std::function<void(int)>& launch) {
  const int reps = std::max(kMinReps, copies);
  std::vector<cudaEvent_t> start(static_cast<size_t>(reps)), stop(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventCreate(&start[static_cast<size_t>(i)]));
    CHECK(cudaEventCreate(&stop[static_cast<size_t>(i)]));
  }
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) {
    // External: an event record node in the graph (a plain record would only order streams).
    CHECK(cudaEventRecordWithFlags(start[static_cast<size_t>(i)], stream, cudaEventRecordExternal));
    launch(i);
    CHECK(cudaEventRecordWithFlags(stop[static_cast<size_t>(i)], stream, cudaEventRecordExternal));
  }
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, stream));  // warm-up: clocks, caches of code, TLBs
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start[static_cast<size_t>(i)], stop[static_cast<size_t>(i)]));
    us.push_back(1000.0 * ms);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventDestroy(start[static_cast<size_t>(i)]));
    CHECK(cudaEventDestroy(stop[static_cast<size_t>(i)]));
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front(), us.back()};
}

/// Time of a launch of the smallest kernel between two event nodes: what every measurement
/// carries besides the kernel's own time (set by measure_floor()).
double g_floor_us = 0;

/// Prints the median and spread, the rate at the median (amount / us, scaled by `per_us`)
/// and the rate net of the launch-and-event floor.
void print(const std::string& name, const Timing& t, double amount, double per_us, const char* unit) {
  const double net = std::max(t.median_us - g_floor_us, 0.01);
  std::printf("%-44s median %8.2f us [min %8.2f, max %8.2f]  %7.1f %s  (net of floor: %7.1f)\n", name.c_str(),
              t.median_us, t.min_us, t.max_us, amount / (t.median_us * per_us), unit, amount / (net * per_us));
}

void measure_floor(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  DeviceMemory a(16), b(16);
  CHECK(cudaMemset(a.ptr, 0, 16));
  CHECK(cudaMemset(b.ptr, 0, 16));
  const Timing t =
      time_launches(stream, 1, [&](int) { CHECK(cuda::add(a.as<float>(), b.as<float>(), a.as<float>(), 1, on)); });
  g_floor_us = t.median_us;
  std::printf("floor: a 1-element add between event nodes takes %.2f us (median; min %.2f, max %.2f)\n", t.median_us,
              t.min_us, t.max_us);
}

// ---- gemv -------------------------------------------------------------------------------------

struct Linear {
  const char* name;
  int64_t N;
  int64_t K;
};
constexpr Linear kGemmaLinears[] = {{"q_proj", 1152, 1152},
                                    {"k_proj/v_proj", 256, 1152},
                                    {"gate_proj/up_proj", 6912, 1152},
                                    {"down_proj", 1152, 6912},
                                    {"lm_head (tied)", 262144, 1152}};

/// "r4u2": a geometry's rows per group and chunks per row and pass.
std::string geometry_name(cuda::GemvGeometry g) {
  return "r" + std::to_string(g.rows) + "u" + std::to_string(g.unroll);
}

/// The geometries a launch of M rows takes.
std::vector<cuda::GemvGeometry> geometries(int64_t M) {
  if (M > 1) return {cuda::kGemvDefaultGeometry};
  return {std::begin(cuda::kGemvGeometries), std::end(cuda::kGemvGeometries)};
}

void bench_gemv(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== gemv, bf16 weights, f32 x/y (bytes: weights + x + y), per geometry (rows, unroll) ==\n");
  for (int64_t M : {1, 4, 8}) {
    for (const Linear& l : kGemmaLinears) {
      if (M > 1 && l.N == 262144) continue;
      const int64_t w_bytes = l.N * l.K * 2;
      const int copies = copies_for(w_bytes);
      DeviceMemory w(static_cast<size_t>(w_bytes) * copies), x(static_cast<size_t>(M * l.K) * 4),
          y(static_cast<size_t>(M * l.N) * 4);
      fill_bf16(w.as<__nv_bfloat16>(), l.N * l.K * copies, 1);
      fill_f32(x.as<float>(), M * l.K, 2);
      for (const cuda::GemvGeometry g : geometries(M)) {
        const Timing t = time_launches(stream, copies, [&](int i) {
          CHECK(cuda::gemv<__nv_bfloat16>(x.as<float>(), w.as<__nv_bfloat16>() + (i % copies) * l.N * l.K, nullptr,
                                          y.as<float>(), M, l.N, l.K, on, g));
        });
        const double bytes = static_cast<double>(w_bytes + M * l.K * 4 + M * l.N * 4);
        print("gemv M=" + std::to_string(M) + " " + geometry_name(g) + " " + l.name + " " + std::to_string(l.N) + "x" +
                  std::to_string(l.K),
              t, bytes, 1e3, "GB/s");
      }
    }
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

// ---- attention decode ---------------------------------------------------------------------------

void bench_attention(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== attention_decode, heads 4, kv_heads 1, head_dim 256, T = 1 (bytes: K + V rows read) ==\n");
  const int64_t heads = 4, kv_heads = 1, hd = 256, max_ctx = 4096;
  const int64_t width = kv_heads * hd;
  // One pool per cache; launch i reads the rows [0, ctx) of a cache starting at row i * ctx
  // of the pool, so consecutive launches read disjoint memory.
  const int64_t pool_floats = kRotateBytes / 4 + max_ctx * width;
  DeviceMemory kc(static_cast<size_t>(pool_floats) * 4), vc(static_cast<size_t>(pool_floats) * 4);
  fill_f32(kc.as<float>(), pool_floats, 5);
  fill_f32(vc.as<float>(), pool_floats, 6);
  DeviceMemory q(static_cast<size_t>(heads * hd) * 4), out(static_cast<size_t>(heads * hd) * 4), pos(sizeof(int32_t));
  fill_f32(q.as<float>(), heads * hd, 7);
  // 8 and 16 splits combine in a cluster (one launch), 32 and 128 in a second kernel.
  for (int max_splits : {8, 16, 32, 128}) {
    DeviceMemory partials(static_cast<size_t>(cuda::attention_decode_partials_floats(1, heads, hd, max_splits)) * 4);
    for (int32_t ctx : {128, 1024, 4096}) {
      const int32_t p = ctx - 1;
      CHECK(cudaMemcpy(pos.ptr, &p, sizeof(p), cudaMemcpyHostToDevice));
      const int copies = static_cast<int>(std::min<int64_t>(512, (pool_floats - max_ctx * width) / (ctx * width)));
      const Timing t = time_launches(stream, copies, [&](int i) {
        const int64_t off = (i % copies) * ctx * width;
        CHECK(cuda::attention_decode(q.as<float>(), nullptr, nullptr, kc.as<float>() + off, vc.as<float>() + off,
                                     pos.ptr, false, out.as<float>(), 1, heads, kv_heads, hd, max_ctx, 0, 0.0625f,
                                     partials.as<float>(), max_splits, nullptr, on));
      });
      const double bytes = 2.0 * ctx * width * 4;
      print("decode ctx=" + std::to_string(ctx) + " max_splits=" + std::to_string(max_splits) + " (splits " +
                std::to_string(cuda::attention_decode_splits(max_ctx, 0, max_splits)) + ")",
            t, bytes, 1e3, "GB/s");
    }
  }
  // The decode step's new K / V row: written by kv_cache_write before the attention, or by the
  // attention kernel itself (k_new / v_new), with 16 splits (one cluster where sm_90 runs).
  DeviceMemory k_new(static_cast<size_t>(width) * 4), v_new(static_cast<size_t>(width) * 4);
  fill_f32(k_new.as<float>(), width, 8);
  fill_f32(v_new.as<float>(), width, 9);
  DeviceMemory partials(static_cast<size_t>(cuda::attention_decode_partials_floats(1, heads, hd, 16)) * 4);
  for (int32_t ctx : {128, 1024}) {
    const int32_t p = ctx - 1;
    CHECK(cudaMemcpy(pos.ptr, &p, sizeof(p), cudaMemcpyHostToDevice));
    const int copies = static_cast<int>(std::min<int64_t>(512, (pool_floats - max_ctx * width) / (ctx * width)));
    for (bool fused : {false, true}) {
      const Timing t = time_launches(stream, copies, [&](int i) {
        float* kcache = kc.as<float>() + (i % copies) * ctx * width;
        float* vcache = vc.as<float>() + (i % copies) * ctx * width;
        if (!fused) {
          CHECK(cuda::kv_cache_write(k_new.as<float>(), v_new.as<float>(), pos.ptr, false, 1, width, kcache, vcache,
                                     max_ctx, nullptr, on));
        }
        CHECK(cuda::attention_decode(q.as<float>(), fused ? k_new.as<float>() : nullptr,
                                     fused ? v_new.as<float>() : nullptr, kcache, vcache, pos.ptr, false,
                                     out.as<float>(), 1, heads, kv_heads, hd, max_ctx, 0, 0.0625f, partials.as<float>(),
                                     16, nullptr, on));
      });
      print(std::string(fused ? "decode + new row, fused" : "kv_cache_write + decode") + " ctx=" + std::to_string(ctx) +
                " (splits 16)",
            t, 2.0 * ctx * width * 4, 1e3, "GB/s");
    }
  }
}

// ---- cuBLASLt GEMM ----------------------------------------------------------------------------------

// ---- attention prefill ------------------------------------------------------------------------------

void bench_attention_prefill(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== attention_prefill, heads 4, kv_heads 1, head_dim 256, causal (FLOP: QK^T and PV) ==\n");
  const int64_t heads = 4, kv_heads = 1, hd = 256, max_ctx = 2048;
  const int64_t width = kv_heads * hd;
  DeviceMemory kc(static_cast<size_t>(max_ctx * width) * 4), vc(static_cast<size_t>(max_ctx * width) * 4);
  fill_f32(kc.as<float>(), max_ctx * width, 11);
  fill_f32(vc.as<float>(), max_ctx * width, 12);
  for (int64_t T : {128, 512, 2048}) {
    DeviceMemory q(static_cast<size_t>(T * heads * hd) * 4), out(static_cast<size_t>(T * heads * hd) * 4);
    fill_f32(q.as<float>(), T * heads * hd, 13);
    std::vector<int32_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = static_cast<int32_t>(t);
    DeviceMemory pos(positions.size() * sizeof(int32_t));
    CHECK(cudaMemcpy(pos.ptr, positions.data(), positions.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    DeviceMemory scratch(
        static_cast<size_t>(std::max<int64_t>(
            1, std::max(cuda::attention_prefill_scratch_floats(T, heads, hd, *on.limits),
                        cuda::attention_prefill_mma_scratch_floats(T, heads, kv_heads, hd, max_ctx, *on.limits)))) *
        4);
    const auto tokens = static_cast<double>(T);
    const double flop = 2.0 * 2.0 * static_cast<double>(heads * hd) * (tokens * (tokens + 1) / 2);
    const Timing tiled = time_launches(stream, 1, [&](int) {
      CHECK(cuda::attention_prefill(q.as<float>(), kc.as<float>(), vc.as<float>(), pos.ptr, false, out.as<float>(), T,
                                    heads, kv_heads, hd, max_ctx, 0, 0.0625f, scratch.as<float>(), on));
    });
    print("prefill tiled T=" + std::to_string(T) + " (splits " +
              std::to_string(cuda::attention_prefill_splits(T, heads, *on.limits)) + ")",
          tiled, flop, 1e6, "TFLOP/s");
    const Timing mma = time_launches(stream, 1, [&](int) {
      CHECK(cuda::attention_prefill_mma(q.as<float>(), nullptr, nullptr, kc.as<float>(), vc.as<float>(), pos.ptr, false,
                                        out.as<float>(), T, heads, kv_heads, hd, max_ctx, 0, 0.0625f,
                                        scratch.as<float>(), nullptr, on));
    });
    print("prefill mma_bf16 T=" + std::to_string(T) + " (splits " +
              std::to_string(cuda::attention_prefill_mma_splits(T, heads, *on.limits)) + ")",
          mma, flop, 1e6, "TFLOP/s");
    // The prefill step as the engine runs it: the call's rows written to the caches (here
    // from q's first T rows) by the kernel that converts the rows to bf16.
    const Timing mma_write = time_launches(stream, 1, [&](int) {
      CHECK(cuda::attention_prefill_mma(q.as<float>(), q.as<float>(), q.as<float>(), kc.as<float>(), vc.as<float>(),
                                        pos.ptr, false, out.as<float>(), T, heads, kv_heads, hd, max_ctx, 0, 0.0625f,
                                        scratch.as<float>(), nullptr, on));
    });
    print("prefill mma_bf16 + cache write T=" + std::to_string(T), mma_write, flop, 1e6, "TFLOP/s");
    const Timing write_then_mma = time_launches(stream, 1, [&](int) {
      CHECK(cuda::kv_cache_write(q.as<float>(), q.as<float>(), pos.ptr, false, T, width, kc.as<float>(), vc.as<float>(),
                                 max_ctx, nullptr, on));
      CHECK(cuda::attention_prefill_mma(q.as<float>(), nullptr, nullptr, kc.as<float>(), vc.as<float>(), pos.ptr, false,
                                        out.as<float>(), T, heads, kv_heads, hd, max_ctx, 0, 0.0625f,
                                        scratch.as<float>(), nullptr, on));
    });
    print("kv_cache_write, then prefill mma_bf16 T=" + std::to_string(T), write_then_mma, flop, 1e6, "TFLOP/s");
  }
}

void bench_gemm(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  gearbox::Result<std::unique_ptr<cuda::CublasLtGemm>> gemm = cuda::CublasLtGemm::create();
  check_status(gemm.status(), "CublasLtGemm::create");
  std::printf("\n== cuBLASLt GEMM, bf16 weights, f32 x/y (%s; times include the x -> bf16 conversion) ==\n",
              cuda::CublasLtGemm::version().c_str());
  for (int64_t M : {128, 512}) {
    for (const Linear& l : kGemmaLinears) {
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

// ---- graph launch -------------------------------------------------------------------------------

/// What a decode step's graph costs the host to launch, by its number of kernel nodes
/// (1-element adds launched as every kernel is, programmatic dependent launch included):
/// the cudaGraphLaunch call alone, and the launch until the stream is drained, with and
/// without cudaGraphUpload after instantiation.
void bench_graph_launch(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== graph launch: host time of cudaGraphLaunch and of launch + drain, by kernel nodes ==\n");
  DeviceMemory a(16), b(16);
  CHECK(cudaMemset(a.ptr, 0, 16));
  CHECK(cudaMemset(b.ptr, 0, 16));
  using Clock = std::chrono::steady_clock;
  const auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  for (int nodes : {28, 220, 420}) {
    for (int upload = 0; upload < 2; ++upload) {
      cudaGraph_t graph = nullptr;
      CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < nodes; ++i) CHECK(cuda::add(a.as<float>(), b.as<float>(), a.as<float>(), 1, on));
      CHECK(cudaStreamEndCapture(stream, &graph));
      cudaGraphExec_t exec = nullptr;
      CHECK(cudaGraphInstantiate(&exec, graph, 0));
      if (upload == 1) CHECK(cudaGraphUpload(exec, stream));
      for (int w = 0; w < 5; ++w) CHECK(cudaGraphLaunch(exec, stream));
      CHECK(cudaStreamSynchronize(stream));
      std::vector<double> call, total;
      for (int r = 0; r < 200; ++r) {
        const auto t0 = Clock::now();
        CHECK(cudaGraphLaunch(exec, stream));
        const auto t1 = Clock::now();
        CHECK(cudaStreamSynchronize(stream));
        const auto t2 = Clock::now();
        call.push_back(us(t1 - t0));
        total.push_back(us(t2 - t0));
      }
      std::sort(call.begin(), call.end());
      std::sort(total.begin(), total.end());
      std::printf("%4d nodes%s  cudaGraphLaunch %7.2f us (p90 %7.2f)  launch + drain %8.2f us (p90 %8.2f)\n", nodes,
                  upload == 1 ? ", uploaded" : "          ", call[100], call[180], total[100], total[180]);
      CHECK(cudaGraphExecDestroy(exec));
      CHECK(cudaGraphDestroy(graph));
    }
  }
}

// ---- a call's host inputs ----------------------------------------------------------------------

/// What a decode call's inputs (a token id and a position, 8 bytes each) cost on its way to
/// the GPU: from a drained stream, the host writes them into page-locked memory, enqueues
/// the copies and then a graph of 28 one-element adds whose first node reads them, and waits
/// for the stream. Each way's launch to return by the host's clock (the copies and the graph
/// enqueued, then the drain), the ways interleaved over the same 300 calls: two 8-byte copies
/// (the session's way), one copy of both packed 8 or 64 bytes apart (16 or 72 bytes), none
/// (the graph's first kernel reads the mapped page-locked memory itself), and the graph alone.
void bench_input_copy(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== a decode call's two 8-byte host inputs: copies, then a 28-node graph, launch to drain ==\n");
  char* pinned = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 256, cudaHostAllocMapped));
  std::memset(pinned, 0, 256);
  DeviceMemory staging(256), b(16), out(16);
  CHECK(cudaMemset(staging.ptr, 0, 256));
  CHECK(cudaMemset(b.ptr, 0, 16));
  struct Way {
    const char* name;
    int copies;        // 0, 1 or 2
    int64_t second;    // the second input's offset
    bool mapped_read;  // the first kernel reads the page-locked memory itself
  };
  const Way ways[] = {{"two 8-byte copies", 2, 64, false},
                      {"one 16-byte copy", 1, 8, false},
                      {"one 72-byte copy", 1, 64, false},
                      {"no copy: the first kernel reads mapped memory", 0, 8, true},
                      {"no inputs: the graph alone", 0, 8, false}};
  constexpr int kWays = sizeof(ways) / sizeof(ways[0]);
  cudaGraphExec_t exec[kWays] = {};
  for (int k = 0; k < kWays; ++k) {
    const char* src = ways[k].mapped_read ? pinned : static_cast<const char*>(staging.ptr);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CHECK(cuda::add(reinterpret_cast<const float*>(src), reinterpret_cast<const float*>(src + ways[k].second),
                    out.as<float>(), 1, on));
    for (int i = 1; i < 28; ++i) CHECK(cuda::add(out.as<float>(), b.as<float>(), out.as<float>(), 1, on));
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec[k], graph, 0));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaGraphUpload(exec[k], stream));
  }
  using Clock = std::chrono::steady_clock;
  const auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  std::vector<double> enqueue[kWays], total[kWays];
  const int64_t token = 7, position = 127;
  for (int r = 0; r < 320; ++r) {
    for (int k = 0; k < kWays; ++k) {
      const Way& way = ways[k];
      const auto t0 = Clock::now();
      if (way.copies > 0 || way.mapped_read) {
        std::memcpy(pinned, &token, 8);
        std::memcpy(pinned + way.second, &position, 8);
      }
      if (way.copies == 2) {
        CHECK(cudaMemcpyAsync(staging.ptr, pinned, 8, cudaMemcpyDefault, stream));
        CHECK(cudaMemcpyAsync(staging.as<char>() + way.second, pinned + way.second, 8, cudaMemcpyDefault, stream));
      } else if (way.copies == 1) {
        CHECK(cudaMemcpyAsync(staging.ptr, pinned, static_cast<size_t>(way.second + 8), cudaMemcpyDefault, stream));
      }
      CHECK(cudaGraphLaunch(exec[k], stream));
      const auto t1 = Clock::now();
      CHECK(cudaStreamSynchronize(stream));
      const auto t2 = Clock::now();
      if (r >= 20) {
        enqueue[k].push_back(us(t1 - t0));
        total[k].push_back(us(t2 - t0));
      }
    }
  }
  for (int k = 0; k < kWays; ++k) {
    std::sort(enqueue[k].begin(), enqueue[k].end());
    std::sort(total[k].begin(), total[k].end());
    const size_t n = total[k].size();
    std::printf("%-48s enqueued in %6.2f us (p90 %6.2f)  launch to return %7.2f us (p10 %7.2f, p90 %7.2f)\n",
                ways[k].name, enqueue[k][n / 2], enqueue[k][n * 9 / 10], total[k][n / 2], total[k][n / 10],
                total[k][n * 9 / 10]);
    CHECK(cudaGraphExecDestroy(exec[k]));
  }
  CHECK(cudaFreeHost(pinned));
}

// ---- one decode layer, and what each of its kernels costs in the chain ------------------------

/// One decode layer at the 1B shape as the decode graph runs it (norm_add_norm, QKV GEMV,
/// head_norm_rope, split-KV attention at context 128 writing the new row, O GEMV,
/// norm_add_norm, gate/up + GELU GEMV, down GEMV; every weight from DRAM, launched with
/// programmatic dependent launch), then the same chain with one kernel left out: the
/// difference is what that kernel adds to the chain (its own time less what overlaps its
/// neighbours). A sliding layer (window 512: 16 splits combined in a cluster) and a global
/// one (32 splits and a combine kernel), as 5 of 6 and 1 of 6 Gemma-3 layers. "norms in the
/// GEMVs": each norm_add_norm computed by the GEMV after it (cuda::GemvNormInput); "head norm
/// in the attention": head_norm_rope computed by the attention (attention_decode_head_norm);
/// "all fused": both, the chain the engine runs where the QKV GEMV leaves SMs free (the 1B's,
/// 384 blocks, does not: it runs "norms in the GEMVs"). The QKV GEMV at 96 blocks with and
/// without the head norm in the attention weighs that rule (docs/PERFORMANCE.md, 2026-12-03
/// third).
void bench_layer(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== one decode layer, 1B shape, context 128, and each kernel left out ==\n");
  constexpr int64_t H = 1152, I = 6912, hd = 256, q_heads = 4, qkv_n = (q_heads + 2) * hd, max_ctx = 2048;
  constexpr int64_t qkv_w = qkv_n * H, o_w = H * q_heads * hd, gu_w = 2 * I * H, d_w = H * I;
  constexpr int64_t layer_w = qkv_w + o_w + gu_w + d_w;
  constexpr int kMaxSplitsEngine = 32;  // as the CUDA device launches it
  const int copies = copies_for(layer_w * 2);
  DeviceMemory w(static_cast<size_t>(layer_w * 2) * copies), norms(H * 4 * 2), inv_freq(hd / 2 * 4), pos(8);
  fill_bf16(w.as<__nv_bfloat16>(), layer_w * copies, 11);
  fill_bf16(norms.as<__nv_bfloat16>(), 4 * H, 12);
  std::vector<float> freq;
  for (int64_t i = 0; i < hd / 2; ++i) freq.push_back(std::pow(10000.0f, -2.0f * static_cast<float>(i) / hd));
  CHECK(cudaMemcpy(inv_freq.ptr, freq.data(), freq.size() * 4, cudaMemcpyHostToDevice));
  const int64_t p127 = 127;
  CHECK(cudaMemcpy(pos.ptr, &p127, 8, cudaMemcpyHostToDevice));
  DeviceMemory kc(static_cast<size_t>(max_ctx * hd) * 4), vc(static_cast<size_t>(max_ctx * hd) * 4), h(H * 4),
      res(H * 4), res2(H * 4), xn(H * 4), qkv(qkv_n * 4), qkv_r(qkv_n * 4), attn(q_heads * hd * 4), act(I * 4),
      partials(static_cast<size_t>(cuda::attention_decode_partials_floats(1, q_heads, hd, kMaxSplitsEngine)) * 4);
  fill_f32(kc.as<float>(), max_ctx * hd, 13);
  fill_f32(vc.as<float>(), max_ctx * hd, 14);
  fill_f32(h.as<float>(), H, 15);
  fill_f32(res.as<float>(), H, 16);
  const auto* g = norms.as<__nv_bfloat16>();
  const cuda::HeadNormRope<__nv_bfloat16> parts[3] = {
      {qkv.as<float>(), g, qkv_r.as<float>(), q_heads, 1e4f, 1.0f, inv_freq.as<float>(), qkv_n},
      {qkv.as<float>() + q_heads * hd, g + hd, qkv_r.as<float>() + q_heads * hd, 1, 1e4f, 1.0f, inv_freq.as<float>(),
       qkv_n},
      {qkv.as<float>() + (q_heads + 1) * hd, nullptr, qkv_r.as<float>() + (q_heads + 1) * hd, 1, 0, 0, nullptr, qkv_n}};
  struct Variant {
    const char* name;
    unsigned skip;  // bit k < 8: leave out the layer's k-th kernel; kNormIn*: a GEMV does the norm before it
    // The GEMVs' geometries (the 1B engine's usual picks by default): QKV, O, gate/up, down.
    cuda::GemvGeometry qkv = {2, 2}, o = {2, 2}, gate_up = {2, 8}, down = {2, 2};
  };
  constexpr unsigned kNormInQkv = 1u << 8, kNormInMlp = 1u << 9, kNormsInGemvs = kNormInQkv | kNormInMlp,
                     kHeadNormInAttention = 1u << 10;
  // The chain the engine runs: both norm_add_norms inside the GEMVs after them.
  constexpr unsigned kEngineChain = kNormsInGemvs | 0x21u, kAllFused = kEngineChain | kHeadNormInAttention | 0x4u;
  const Variant variants[] = {{"whole layer", 0},
                              {"without norm_add_norm 1", 1u << 0},
                              {"without QKV", 1u << 1},
                              {"without head_norm_rope", 1u << 2},
                              {"without attention", 1u << 3},
                              {"without O", 1u << 4},
                              {"without norm_add_norm 2", 1u << 5},
                              {"without gate/up", 1u << 6},
                              {"without down", 1u << 7},
                              {"GEMVs only", 0x2du},
                              {"no GEMVs", 0xd2u},
                              {"norms in the GEMVs", kEngineChain},
                              {"norm 1 in the QKV GEMV", kNormInQkv | 0x1u},
                              {"norm 2 in the gate/up GEMV", kNormInMlp | 0x20u},
                              {"head norm in the attention", kHeadNormInAttention | 0x4u},
                              {"all fused", kAllFused},
                              // The engine's chain (norms in the GEMVs) with one GEMV on another geometry:
                              // how much the chain's ranking of geometries differs from each GEMV's alone.
                              {.name = "norms in GEMVs, QKV r4u2", .skip = kEngineChain, .qkv = {4, 2}},
                              {.name = "norms in GEMVs, QKV r2u4", .skip = kEngineChain, .qkv = {2, 4}},
                              {.name = "norms in GEMVs, O r4u2", .skip = kEngineChain, .o = {4, 2}},
                              {.name = "norms in GEMVs, O r8u2", .skip = kEngineChain, .o = {8, 2}},
                              {.name = "norms in GEMVs, gate/up r2u4", .skip = kEngineChain, .gate_up = {2, 4}},
                              {.name = "norms in GEMVs, gate/up r4u2", .skip = kEngineChain, .gate_up = {4, 2}},
                              {.name = "norms in GEMVs, down r4u2", .skip = kEngineChain, .down = {4, 2}},
                              {.name = "norms in GEMVs, down r8u2", .skip = kEngineChain, .down = {8, 2}},
                              {.name = "norms in GEMVs, down r4u4", .skip = kEngineChain, .down = {4, 4}},
                              // A QKV GEMV of 96 blocks (fewer than the SMs), the head norm in the attention or
                              // not: whether the fusion pays for the QKV geometry it needs.
                              {.name = "norms in GEMVs, QKV r2u8", .skip = kEngineChain, .qkv = {2, 8}},
                              {.name = "norms in GEMVs, QKV r4u4", .skip = kEngineChain, .qkv = {4, 4}},
                              {.name = "norms in GEMVs, QKV r8u2", .skip = kEngineChain, .qkv = {8, 2}},
                              {.name = "all fused, QKV r2u8", .skip = kAllFused, .qkv = {2, 8}},
                              {.name = "all fused, QKV r4u4", .skip = kAllFused, .qkv = {4, 4}},
                              {.name = "all fused, QKV r8u2", .skip = kAllFused, .qkv = {8, 2}}};
  const cuda::AttentionHeadNorm<__nv_bfloat16> head_norm{g, g + hd, 1e-6f, 1.0f, 1e4f, 1.0f, inv_freq.as<float>()};
  for (int64_t window : {512, 0}) {
    for (const Variant& v : variants) {
      const auto run = [&](unsigned k) { return (v.skip & (1u << k)) == 0; };
      const bool fused_qkv = (v.skip & kNormInQkv) != 0, fused_mlp = (v.skip & kNormInMlp) != 0;
      // Fused, sum cannot be the residual it reads: the two norms alternate res and res2.
      const cuda::GemvNormInput<__nv_bfloat16> before_qkv{h.as<float>(), g,   res.as<float>(), res2.as<float>(), g + H,
                                                          1e-6f,         1.0f};
      const cuda::GemvNormInput<__nv_bfloat16> before_mlp{
          h.as<float>(), g + 2 * H, res2.as<float>(), res.as<float>(), g + 3 * H, 1e-6f, 1.0f};
      const Timing t = time_launches(stream, copies, [&](int i) {
        const __nv_bfloat16* qkv_wt = w.as<__nv_bfloat16>() + (i % copies) * layer_w;
        const __nv_bfloat16* o_wt = qkv_wt + qkv_w;
        const __nv_bfloat16* gate_wt = o_wt + o_w;
        const __nv_bfloat16* down_wt = gate_wt + gu_w;
        if (run(0)) {
          CHECK(cuda::norm_add_norm(h.as<float>(), g, res.as<float>(), res.as<float>(), g + H, xn.as<float>(), 1, H,
                                    1e-6f, 1.0f, on));
        }
        if (run(1)) {
          const cuda::GemvTarget<__nv_bfloat16> targets[3] = {
              {qkv_wt, nullptr, qkv.as<float>(), q_heads * hd},
              {qkv_wt + q_heads * hd * H, nullptr, qkv.as<float>() + q_heads * hd, hd},
              {qkv_wt + (q_heads + 1) * hd * H, nullptr, qkv.as<float>() + (q_heads + 1) * hd, hd}};
          CHECK(cuda::gemv_multi<__nv_bfloat16>(xn.as<float>(), targets, 3, 1, H, on, v.qkv, 0,
                                                fused_qkv ? &before_qkv : nullptr));
        }
        if (run(2)) CHECK(cuda::head_norm_rope(parts, 3, pos.ptr, true, 1, hd, 1e-6f, 1.0f, nullptr, on));
        if (run(3) && (v.skip & kHeadNormInAttention) != 0) {
          CHECK(cuda::attention_decode_head_norm<__nv_bfloat16>(
              qkv.as<float>(), qkv.as<float>() + q_heads * hd, qkv.as<float>() + (q_heads + 1) * hd, kc.as<float>(),
              vc.as<float>(), pos.ptr, true, attn.as<float>(), q_heads, 1, hd, max_ctx, window, 0.0625f, head_norm,
              partials.as<float>(), kMaxSplitsEngine, nullptr, on, /*positions_from_host=*/true));
        } else if (run(3)) {
          CHECK(cuda::attention_decode(qkv_r.as<float>(), qkv_r.as<float>() + q_heads * hd,
                                       qkv_r.as<float>() + (q_heads + 1) * hd, kc.as<float>(), vc.as<float>(), pos.ptr,
                                       true, attn.as<float>(), 1, q_heads, 1, hd, max_ctx, window, 0.0625f,
                                       partials.as<float>(), kMaxSplitsEngine, nullptr, on,
                                       /*positions_from_host=*/true));
        }
        if (run(4)) {
          CHECK(cuda::gemv<__nv_bfloat16>(attn.as<float>(), o_wt, nullptr, h.as<float>(), 1, H, q_heads * hd, on, v.o));
        }
        if (run(5)) {
          CHECK(cuda::norm_add_norm(h.as<float>(), g + 2 * H, res.as<float>(), res.as<float>(), g + 3 * H,
                                    xn.as<float>(), 1, H, 1e-6f, 1.0f, on));
        }
        if (run(6)) {
          CHECK(cuda::gemv_gated<__nv_bfloat16>(xn.as<float>(), gate_wt, gate_wt + I * H, nullptr, nullptr,
                                                cuda::GatedActivation::kGeluTanh, act.as<float>(), 1, I, H, on,
                                                v.gate_up, 0, fused_mlp ? &before_mlp : nullptr));
        }
        if (run(7)) {
          CHECK(cuda::gemv<__nv_bfloat16>(act.as<float>(), down_wt, nullptr, h.as<float>(), 1, H, I, on, v.down));
        }
      });
      print(std::string(window > 0 ? "sliding layer, " : "global layer, ") + v.name, t, layer_w * 2.0, 1e3, "GB/s");
    }
  }
}

/// A decode layer's GEMV bytes (53.7 MB: four matrices of K = 1152 whose sizes are the 1B
/// layer's QKV, O, gate/up and down) streamed three ways, with no data flowing between them:
/// four launches (each waiting for the one before it, as PDL launches do), one gemv_multi
/// launch over the four (one resident grid streams them back to back), and one launch over a
/// single matrix of all their rows. What kernel boundaries cost the weight stream apart from
/// the data they wait for (docs/PERFORMANCE.md, 2026-12-02 ninth).
void bench_stream(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== a decode layer's GEMV bytes (53.7 MB, K = 1152): 4 launches, 1 multi-target launch, 1 matrix ==\n");
  constexpr int64_t K = 1152;
  constexpr int64_t kRows[4] = {1536, 1024, 13824, 6912};  // the bytes of QKV, O, gate + up, down
  constexpr int64_t total = kRows[0] + kRows[1] + kRows[2] + kRows[3];
  const int copies = copies_for(total * K * 2);
  DeviceMemory w(static_cast<size_t>(total * K * 2) * copies), x(static_cast<size_t>(K) * 4),
      y(static_cast<size_t>(total) * 4);
  fill_bf16(w.as<__nv_bfloat16>(), total * K * copies, 31);
  fill_f32(x.as<float>(), K, 32);
  const double bytes = static_cast<double>(total * K * 2);
  const auto base = [&](int i) { return w.as<__nv_bfloat16>() + (i % copies) * total * K; };  // copy i
  for (const cuda::GemvGeometry g : {cuda::GemvGeometry{2, 2}, cuda::GemvGeometry{2, 8}, cuda::GemvGeometry{4, 2}}) {
    const Timing four = time_launches(stream, copies, [&](int i) {
      int64_t row = 0;
      for (const int64_t n : kRows) {
        CHECK(
            cuda::gemv<__nv_bfloat16>(x.as<float>(), base(i) + row * K, nullptr, y.as<float>() + row, 1, n, K, on, g));
        row += n;
      }
    });
    print("4 launches " + geometry_name(g), four, bytes, 1e3, "GB/s");
    const Timing multi = time_launches(stream, copies, [&](int i) {
      cuda::GemvTarget<__nv_bfloat16> targets[4];
      int64_t row = 0;
      for (int j = 0; j < 4; ++j) {
        targets[j] = {base(i) + row * K, nullptr, y.as<float>() + row, kRows[j]};
        row += kRows[j];
      }
      CHECK(cuda::gemv_multi<__nv_bfloat16>(x.as<float>(), targets, 4, 1, K, on, g));
    });
    print("1 launch, 4 targets " + geometry_name(g), multi, bytes, 1e3, "GB/s");
    const Timing one = time_launches(stream, copies, [&](int i) {
      CHECK(cuda::gemv<__nv_bfloat16>(x.as<float>(), base(i), nullptr, y.as<float>(), 1, total, K, on, g));
    });
    print("1 launch, 1 matrix " + geometry_name(g), one, bytes, 1e3, "GB/s");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s: %d SMs, %.0f MB L2, >= %d launches per measurement, data rotated over >= %lld MB\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6, kMinReps, static_cast<long long>(kRotateBytes >> 20));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Programmatic dependent launch wherever the sm_90 code runs, as the engine launches.
  const cuda::DeviceLimits& limits = cuda::device_limits(0);
  const cuda::Launch on{stream, limits.hopper_code_runs, limits.hopper_code_runs, &limits};
  measure_floor(on);
  if (only.empty() || only == "gemv") bench_gemv(on);
  if (only.empty() || only == "host_out") bench_host_out(on);
  if (only.empty() || only == "attention") bench_attention(on);
  if (only.empty() || only == "prefill") bench_attention_prefill(on);
  if (only.empty() || only == "gemm") bench_gemm(on);
  if (only.empty() || only == "gemm" || only == "qkv") bench_qkv_merge(on);
  if (only.empty() || only == "gemm" || only == "gate_up") bench_gate_up(on);
  if (only == "gemm_m") bench_gemm_sweep(on);
  if (only.empty() || only == "rows") bench_rows(on);
  if (only.empty() || only == "graph_launch") bench_graph_launch(on);
  if (only.empty() || only == "input_copy") bench_input_copy(on);
  if (only.empty() || only == "layer") bench_layer(on);
  if (only.empty() || only == "stream") bench_stream(on);
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
