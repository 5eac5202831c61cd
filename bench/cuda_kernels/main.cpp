// Microbenchmark of the CUDA device's hot kernels at Gemma-3-1B shapes (bf16 weights):
// decode gemv (M = 1, fused forms too), flash-decoding attention and the cuBLASLt GEMM.
//
// Each measurement captures max(30, copies) launches into a CUDA graph, each launch between
// two event records, so the per-launch times carry no host launch gaps; the graph runs once
// to warm up and once to measure, and the median and spread of the per-launch times are
// printed with the achieved bandwidth (or FLOP/s). Weights (and KV caches) rotate over
// enough copies (>= 240 MB together, 4x the 60 MB L2) that every launch reads its data
// from DRAM, as in a real decode step. The event nodes themselves cost a few microseconds
// per launch (the "floor", measured first with a 1-element add): rates are printed both as
// measured and net of that floor, which is closer to what a launch costs inside a decode graph.
//
// The groups gemv, gemm, attention and prefill time the cases of the table the kernel tests
// check (tests/support/cuda_kernel_cases.h, the cases marked for timing), the group generic
// every case of tests/support/generic_cases.h; the groups live in
// bench/cuda_kernels/*_bench.cpp (one file per kernel family), the timing in bench_common.cpp.
//
//   cuda_kernels_bench            # all groups
//   cuda_kernels_bench gemv       # one group: gemv | host_out | attention | prefill | gemm | qkv |
//                                 #            gate_up | rows | graph_launch |
//                                 #            input_copy | layer | stream | generic
//   cuda_kernels_bench gemm_m     # cuBLASLt's heuristics by M at the prefill shapes (not in "all")

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "bench_common.h"
#include "devices/cuda/launch.h"

using namespace gearbox::kernel_bench;  // NOLINT(google-build-using-namespace)
namespace cuda = gearbox::cuda;

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
  if (only.empty() || only == "generic") bench_generic(on);
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
