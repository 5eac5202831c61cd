// What a persistent decode step could reach at best: one launch of resident blocks streams a
// decode step's weights matrix after matrix (y = W x, each x the previous matrix's y), with
// a grid-wide barrier between dependent matrices or none, and with each warp's first weight
// loads of the next matrix issued before it waits or not (kernel_probes step_stream). No
// norms, no attention arithmetic: an optional stand-in phase, where a few blocks spin, takes
// the attention's place. It bounds the design of ARCHITECTURE.md "Not yet built".
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace gearbox::bench {

/// The longest row a phase may have (x is staged in shared memory).
constexpr int kStepStreamMaxK = 8192;

/// One phase: y[rows] = W[rows, k] x[k] (bf16 W, f32 x and y), or, where rows is 0, a
/// stand-in for latency-bound work: blocks < spin_blocks spin for spin_ns, the others go on
/// to the barrier.
struct StreamPhase {
  const __nv_bfloat16* w = nullptr;
  const float* x = nullptr;
  float* y = nullptr;
  int rows = 0;
  int k = 0;  // a multiple of 8, at most kStepStreamMaxK
  int spin_blocks = 0;
  uint32_t spin_ns = 0;
};

/// How phases follow each other.
struct StepSync {
  bool barrier = false;  // a grid-wide barrier between phases (else no wait: x may be stale)
  int lookahead = 0;     // pieces (0, 1 or 2) of its next phase a warp issues before it waits
  bool rotate = false;   // phase p's rows start at warp p * 997 % warps (else at warp 0), so that
                         // the warps with one row more than others change from phase to phase
};

/// Blocks of the probe's kernel the device holds at once: the grid of every launch.
int step_stream_blocks();

/// One launch over `count` phases (a device array), `counter` zeroed first.
cudaError_t step_stream_launch(const StreamPhase* phases, int count, StepSync sync, unsigned* counter,
                               cudaStream_t stream);

}  // namespace gearbox::bench
