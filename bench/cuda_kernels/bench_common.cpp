#include "bench_common.h"

#include <algorithm>
#include <cstdlib>
#include <random>

#include "devices/cuda/kernels/elementwise.cuh"

namespace gearbox::kernel_bench {

void check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, cudaGetErrorString(err));
    std::exit(1);
  }
}

void check_status(const gearbox::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}

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
static double g_floor_us = 0;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

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

/// "r4u2": a geometry's rows per group and chunks per row and pass.
std::string geometry_name(cuda::GemvGeometry g) {
  return "r" + std::to_string(g.rows) + "u" + std::to_string(g.unroll);
}

/// The geometries a launch of M rows takes.
std::vector<cuda::GemvGeometry> geometries(int64_t M) {
  if (M > 1) return {cuda::gemv_rows_geometry(M)};
  return {std::begin(cuda::kGemvGeometries), std::end(cuda::kGemvGeometries)};
}

std::vector<Linear> timed_linears() {
  std::vector<Linear> linears;
  for (const Linear& l : kernel_cases::gemv_cases()) {
    if (l.use.time) linears.push_back(l);
  }
  return linears;
}

std::vector<kernel_cases::AttentionCase> timed_attention_cases() {
  std::vector<kernel_cases::AttentionCase> cases;
  for (const kernel_cases::AttentionCase& c : kernel_cases::attention_cases()) {
    if (c.use.time) cases.push_back(c);
  }
  return cases;
}

}  // namespace gearbox::kernel_bench
