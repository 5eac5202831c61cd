// Probes of what kernel boundaries cost the GPU, kept as experiments (dev/README.md): the
// handoff between two dependent kernels for each way of waiting (handoff_probe.h), and a
// decode step's weights streamed by one persistent launch (step_stream_probe.h). Timed with
// bench/cuda_kernels/bench_common.h: launches captured into a graph between event nodes,
// median and spread, rates also net of the floor (a 1-element add between event nodes).
//
//   kernel_probes                # both groups
//   kernel_probes handoff        # one group: handoff | step_stream
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "devices/cuda/launch.h"
#include "handoff_probe.h"
#include "step_stream_probe.h"

namespace {

namespace cuda = gearbox::cuda;
using gearbox::kernel_bench::DeviceMemory;
using gearbox::kernel_bench::fill_bf16;
using gearbox::kernel_bench::fill_f32;
using gearbox::kernel_bench::print;
using gearbox::kernel_bench::time_launches;
using gearbox::kernel_bench::Timing;

/// What a dependency between two kernels costs on its own (handoff_probe.h): the time from
/// the last producer block's end to the consumer's first and last block going on, median and
/// p10 / p90 over 200 launches of each way of waiting, in ns (%globaltimer on both sides).
void bench_handoff(cudaStream_t stream) {
  std::printf("\n== a kernel boundary's handoff: last producer block done -> consumer blocks going on (ns) ==\n");
  constexpr size_t kConsumers = 264, kMostProducers = 528;
  constexpr int kReps = 200;
  constexpr uint32_t kSpinNs = 20000;  // the consumer is launched and resident long before the producer ends
  DeviceMemory end(kMostProducers * 8), go(kConsumers * 8), counter(16), payload(kMostProducers * 4), bad(16);
  const gearbox::bench::HandoffBuffers b{end.as<uint64_t>(), go.as<uint64_t>(), counter.as<unsigned>(),
                                         payload.as<float>(), bad.as<int>()};
  CHECK(cudaMemset(b.bad, 0, sizeof(int)));
  using gearbox::bench::HandoffWait;
  const std::pair<HandoffWait, const char*> ways[] = {{HandoffWait::kPlain, "plain launch"},
                                                      {HandoffWait::kGridDepend, "PDL, griddepcontrol.wait"},
                                                      {HandoffWait::kFlag, "PDL, counter release/acquire"},
                                                      {HandoffWait::kNone, "PDL, no wait (floor)"}};
  const auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  };
  std::vector<uint64_t> host_end(kMostProducers), host_go(kConsumers);
  for (const int producers : {132, 264, 528}) {
    for (const auto& [way, name] : ways) {
      std::vector<double> first, last;
      for (int rep = 0; rep < kReps; ++rep) {
        const float stamp = static_cast<float>(rep + 1);
        CHECK(gearbox::bench::handoff_launch(b, way, producers, static_cast<int>(kConsumers), kSpinNs, stamp, stream));
        CHECK(cudaStreamSynchronize(stream));
        CHECK(cudaMemcpy(host_end.data(), b.producer_end, static_cast<size_t>(producers) * 8, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(host_go.data(), b.consumer_go, kConsumers * 8, cudaMemcpyDeviceToHost));
        const uint64_t done = *std::max_element(host_end.begin(), host_end.begin() + producers);
        const auto [lo, hi] = std::minmax_element(host_go.begin(), host_go.end());
        first.push_back(static_cast<double>(static_cast<int64_t>(*lo - done)));
        last.push_back(static_cast<double>(static_cast<int64_t>(*hi - done)));
      }
      std::printf(
          "  %3d producer blocks, %-30s first %6.0f (p10 %6.0f, p90 %6.0f)   last %6.0f (p10 %6.0f, p90 %6.0f)\n",
          producers, name, pct(first, 0.5), pct(first, 0.1), pct(first, 0.9), pct(last, 0.5), pct(last, 0.1),
          pct(last, 0.9));
    }
  }
  int host_bad = 0;
  CHECK(cudaMemcpy(&host_bad, b.bad, sizeof(int), cudaMemcpyDeviceToHost));
  std::printf("  payload checks: %s\n", host_bad == 0 ? "every consumer that waited read this launch's payload"
                                                      : "FAILED: a consumer that waited read an old payload");
}

/// A decode step's weights at the 1B shape (26 layers of QKV, O, gate + up and down, then the
/// lm_head: 2.0 GB) streamed by one persistent launch (step_stream_probe.h): with no wait
/// between matrices or a grid-wide barrier, each warp issuing 0, 1 or 2 pieces of the next
/// matrix before it waits, the rows' order rotated from matrix to matrix or not; then with a
/// stand-in for the attention (64 blocks spinning) after each QKV. Against one matrix of the
/// same bytes: what the boundaries between a step's dependent matrices cost a persistent
/// launch that waits at grid-wide barriers.
void bench_step_stream(cudaStream_t stream) {
  using gearbox::bench::StepSync;
  using gearbox::bench::StreamPhase;
  std::printf("\n== a decode step's weights (1B shape, 2.0 GB) in one persistent launch, %d blocks ==\n",
              gearbox::bench::step_stream_blocks());
  constexpr int64_t H = 1152, I = 6912, Q = 1024, kLayers = 26, kVocab = 262144;
  constexpr int64_t layer_w = (Q + 512) * H + H * Q + 2 * I * H + H * I;
  constexpr int64_t total_w = kLayers * layer_w + kVocab * H;
  DeviceMemory w(static_cast<size_t>(total_w) * 2), a(H * 4), qkv((Q + 512) * 4), o(H * 4), gu(2 * I * 4),
      logits(total_w / H * 4), counter(16), table(sizeof(StreamPhase) * 256);
  fill_bf16(w.as<__nv_bfloat16>(), total_w, 41);
  fill_f32(a.as<float>(), H, 42);
  const auto* base = w.as<__nv_bfloat16>();
  // The step's phases; spin_ns > 0 adds the attention stand-in after each QKV.
  const auto step = [&](bool lm_head, uint32_t spin_ns) {
    std::vector<StreamPhase> phases;
    const __nv_bfloat16* next = base;
    const auto add = [&](const float* x, float* y, int64_t rows, int64_t k) {
      phases.push_back({next, x, y, static_cast<int>(rows), static_cast<int>(k), 0, 0});
      next += rows * k;
    };
    for (int64_t l = 0; l < kLayers; ++l) {
      add(a.as<float>(), qkv.as<float>(), Q + 512, H);
      if (spin_ns > 0) phases.push_back({nullptr, nullptr, nullptr, 0, 0, 64, spin_ns});
      add(qkv.as<float>(), o.as<float>(), H, Q);
      add(o.as<float>(), gu.as<float>(), 2 * I, H);
      add(gu.as<float>(), a.as<float>(), H, I);
    }
    if (lm_head) add(a.as<float>(), logits.as<float>(), kVocab, H);
    return phases;
  };
  struct Row {
    const char* name;
    std::vector<StreamPhase> phases;
    StepSync sync;
    double bytes;
  };
  const double layers_bytes = kLayers * layer_w * 2.0, step_bytes = total_w * 2.0;
  const std::vector<StreamPhase> one = {
      {base, a.as<float>(), logits.as<float>(), static_cast<int>(total_w / H), static_cast<int>(H), 0, 0}};
  const StepSync free{false, 0}, free1{false, 1}, free2{false, 2}, bar{true, 0}, bar1{true, 1}, bar2{true, 2},
      free_rotated{false, 0, true}, bar1_rotated{true, 1, true};
  const std::vector<StreamPhase> full = step(true, 0), layers = step(false, 0), full_2us = step(true, 2000),
                                 full_4us = step(true, 4000);
  const Row rows[] = {{"one matrix of the step's bytes", one, free, step_bytes},
                      {"step, no wait", full, free, step_bytes},
                      {"step, no wait, lookahead 1", full, free1, step_bytes},
                      {"step, no wait, lookahead 2", full, free2, step_bytes},
                      {"step, barriers", full, bar, step_bytes},
                      {"step, barriers, lookahead 1", full, bar1, step_bytes},
                      {"step, barriers, lookahead 2", full, bar2, step_bytes},
                      {"step, no wait, rotated", full, free_rotated, step_bytes},
                      {"step, barriers, lookahead 1, rotated", full, bar1_rotated, step_bytes},
                      {"layers only, no wait, lookahead 2", layers, free2, layers_bytes},
                      {"layers only, barriers, lookahead 2", layers, bar2, layers_bytes},
                      {"step + 2 us stand-in, barriers, lookahead 2", full_2us, bar2, step_bytes},
                      {"step + 4 us stand-in, barriers, lookahead 2", full_4us, bar2, step_bytes}};
  for (const Row& r : rows) {
    CHECK(cudaMemcpy(table.ptr, r.phases.data(), r.phases.size() * sizeof(StreamPhase), cudaMemcpyHostToDevice));
    const Timing t = time_launches(stream, 1, [&](int) {
      CHECK(gearbox::bench::step_stream_launch(table.as<StreamPhase>(), static_cast<int>(r.phases.size()), r.sync,
                                               counter.as<unsigned>(), stream));
    });
    print(std::string(r.name) + " (" + std::to_string(r.phases.size()) + " phases)", t, r.bytes, 1e3, "GB/s");
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
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Launched as the bench launches.
  const cuda::DeviceLimits& limits = cuda::device_limits(0);
  gearbox::kernel_bench::measure_floor(cuda::Launch{stream, limits.hopper_code_runs, limits.hopper_code_runs, &limits});
  if (only.empty() || only == "handoff") bench_handoff(stream);
  if (only.empty() || only == "step_stream") bench_step_stream(stream);
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
