// Shared by the groups of cuda_kernels_bench (bench/cuda_kernels/*_bench.cpp): checked CUDA
// calls, device memory, data fills, the graph-captured timing of launches and the printing
// of a measurement, and the cases of tests/support/cuda_kernel_cases.h the groups time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/launch.h"
#include "gearbox/status.h"
#include "support/cuda_kernel_cases.h"

namespace gearbox::kernel_bench {

inline constexpr int kMinReps = 30;                          // timed launches per measurement, at least
inline constexpr int64_t kRotateBytes = int64_t{240} << 20;  // > 4x the H200's 60 MB L2

/// Exits with the failing call, its file and line when a CUDA call fails.
void check(cudaError_t err, const char* call, const char* file, int line);
#define CHECK(call) ::gearbox::kernel_bench::check((call), #call, __FILE__, __LINE__)

/// Exits naming `what` when s is an error.
void check_status(const gearbox::Status& s, const char* what);

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
void fill_bf16(__nv_bfloat16* dst, int64_t n, uint32_t seed);
void fill_f32(float* dst, int64_t n, uint32_t seed);

/// How many copies of `bytes` of data rotate over at least kRotateBytes (4 to 512).
int copies_for(int64_t bytes);

struct Timing {
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
};

/// Times launch(i) for i < max(kMinReps, copies) inside one captured graph, each launch
/// between two events; launch(i) is to read copy i % copies of its data.
Timing time_launches(cudaStream_t stream, int copies, const std::function<void(int)>& launch);

/// Prints the median and spread, the rate at the median (amount / us, scaled by `per_us`)
/// and the rate net of the launch-and-event floor.
void print(const std::string& name, const Timing& t, double amount, double per_us, const char* unit);

/// Measures the floor every later print() subtracts: a 1-element add between event nodes.
void measure_floor(const cuda::Launch& on);

/// "r4u2": a geometry's rows per group and chunks per row and pass.
std::string geometry_name(cuda::GemvGeometry g);
/// The geometries a launch of M rows takes.
std::vector<cuda::GemvGeometry> geometries(int64_t M);

/// The linear layers of the case table marked for timing (the 1B's, lm_head last).
using Linear = kernel_cases::LinearCase;
std::vector<Linear> timed_linears();
/// The attention cases of the table marked for timing (the 1B's global layer).
std::vector<kernel_cases::AttentionCase> timed_attention_cases();

// The groups (argument of cuda_kernels_bench).
void bench_gemv(const cuda::Launch& on);
void bench_host_out(const cuda::Launch& on);
void bench_attention(const cuda::Launch& on);
void bench_attention_prefill(const cuda::Launch& on);
void bench_gemm(const cuda::Launch& on);
void bench_qkv_merge(const cuda::Launch& on);
void bench_gate_up(const cuda::Launch& on);
void bench_gemm_sweep(const cuda::Launch& on);
void bench_rows(const cuda::Launch& on);
void bench_graph_launch(const cuda::Launch& on);
void bench_input_copy(const cuda::Launch& on);
void bench_layer(const cuda::Launch& on);
void bench_stream(const cuda::Launch& on);
void bench_generic(const cuda::Launch& on);

}  // namespace gearbox::kernel_bench
