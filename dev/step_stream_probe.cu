// The kernel of kernel_probes' step_stream group (step_stream_probe.h).
//
// A warp takes rows gw, gw + warps, ... of a phase (gw: its place, its index in the grid or
// that rotated by the phase), each row in pieces of 256 16-byte chunks: 8 loads a lane, load
// j of lane l reading chunk j * 32 + l of the piece (512 contiguous bytes a warp load). Two
// register buffers of a piece each: the warp issues its next piece (of this row or its next
// one) before it multiplies the current one with x from shared memory, so a warp's stream has
// no gap between pieces or rows. Two blocks of 8 warps an SM keep up to 128 KB of loads in
// flight an SM.
//
// The barrier is split: a block arrives (thread 0's release-add on one counter, after a block
// barrier) and only then issues its lookahead, its warps' first pieces of the next phase, and
// waits (thread 0 acquire-polls the counter). A release orders the thread's earlier loads too,
// so loads issued before the arrival would hold it back by a DRAM round trip.
#include "step_stream_probe.h"

#include <algorithm>

#include "device_sync.cuh"
#include "devices/cuda/device_math.h"

namespace gearbox::bench {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBatch = 8;  // 16-byte loads a lane has in flight a buffer
constexpr int kPieceChunks = kBatch * 32;
constexpr int kBlocksPerSm = 2;

/// A warp's place in a phase: its t-th piece is piece t % pieces of row gw + (t / pieces) * warps.
struct Work {
  int row;
  int piece;
  bool valid;
};

__device__ __forceinline__ Work work_at(const StreamPhase& ph, int gw, int warps, int pieces, int t) {
  const int row = gw + (t / pieces) * warps;
  return {row, t % pieces, row < ph.rows};
}

/// Piece `piece` of `row` into w (chunks past the row read as zero).
__device__ __forceinline__ void issue(const StreamPhase& ph, Work at, int lane, uint4 (&w)[kBatch]) {
  const int chunks = ph.k / 8;
  const uint4* r = reinterpret_cast<const uint4*>(ph.w) + static_cast<int64_t>(at.row) * chunks;
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const int c = at.piece * kPieceChunks + j * 32 + lane;
    w[j] = c < chunks ? cuda::load_stream_16(r + c) : make_uint4(0u, 0u, 0u, 0u);
  }
}

/// The lane's part of the piece's dot product with x (in shared memory).
__device__ __forceinline__ float consume(const StreamPhase& ph, int piece, int lane, const uint4 (&w)[kBatch],
                                         const float4* x_s) {
  const int chunks = ph.k / 8;
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const int c = piece * kPieceChunks + j * 32 + lane;
    if (c < chunks) {
      const float4 a = x_s[2 * c];
      const float4 b = x_s[2 * c + 1];
      const float2 p0 = cuda::unpack2(w[j].x, __nv_bfloat16{});
      const float2 p1 = cuda::unpack2(w[j].y, __nv_bfloat16{});
      const float2 p2 = cuda::unpack2(w[j].z, __nv_bfloat16{});
      const float2 p3 = cuda::unpack2(w[j].w, __nv_bfloat16{});
      acc += p0.x * a.x + p0.y * a.y + p1.x * a.z + p1.y * a.w + p2.x * b.x + p2.y * b.y + p3.x * b.z + p3.y * b.w;
    }
  }
  return acc;
}

/// Adds piece `at`'s part to the row's sum; at the row's last piece, stores the row.
__device__ __forceinline__ void finish_piece(const StreamPhase& ph, Work at, int pieces, int lane, float part,
                                             float* acc) {
  *acc += part;
  if (at.piece == pieces - 1) {
    const float sum = cuda::warp_sum(*acc);
    if (lane == 0) ph.y[at.row] = sum;
    *acc = 0.0f;
  }
}

template <bool kBarrier, int kLookahead>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    step_stream_kernel(const StreamPhase* phases, int count, unsigned* counter, bool rotate) {
  __shared__ float4 x_s[kStepStreamMaxK / 4];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_index = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / 32;
  const int warps = static_cast<int>(gridDim.x) * kWarps;
  // The warp's place in phase p's order of rows.
  const auto place = [&](int p) { return rotate ? (warp_index + warps - p * 997 % warps) % warps : warp_index; };
  uint4 wa[kBatch];
  uint4 wb[kBatch];
  int held = 0;  // pieces of the next phase with rows in wa (its first) and wb (its second)
  for (int p = 0; p < count; ++p) {
    const StreamPhase ph = phases[p];
    const int gw = place(p);
    if (ph.rows == 0) {
      if (static_cast<int>(blockIdx.x) < ph.spin_blocks && threadIdx.x == 0) {
        const uint64_t until = cuda::global_ns() + ph.spin_ns;
        while (cuda::global_ns() < until) {
        }
      }
    } else {
      float* x = reinterpret_cast<float*>(x_s);
#pragma unroll 4
      for (int i = static_cast<int>(threadIdx.x); i < ph.k; i += kThreads) x[i] = __ldcg(ph.x + i);
      __syncthreads();
      const int pieces = (ph.k / 8 + kPieceChunks - 1) / kPieceChunks;
      Work a = work_at(ph, gw, warps, pieces, 0);
      if (a.valid && held < 1) issue(ph, a, lane, wa);
      float acc = 0.0f;
      for (int t = 0; a.valid; t += 2) {
        const Work b = work_at(ph, gw, warps, pieces, t + 1);
        if (b.valid && (t > 0 || held < 2)) issue(ph, b, lane, wb);
        finish_piece(ph, a, pieces, lane, consume(ph, a.piece, lane, wa, x_s), &acc);
        if (!b.valid) break;
        a = work_at(ph, gw, warps, pieces, t + 2);
        if (a.valid) issue(ph, a, lane, wa);
        finish_piece(ph, b, pieces, lane, consume(ph, b.piece, lane, wb, x_s), &acc);
      }
      held = 0;
    }
    if (p + 1 == count) break;
    __syncthreads();  // the block's stores are done and x is read before the next phase stages its own
    if constexpr (kBarrier) {
      if (threadIdx.x == 0) release_add_one(counter);
    }
    if constexpr (kLookahead > 0) {
      for (int q = p + 1; q < count && held == 0; ++q) {
        const StreamPhase next = phases[q];
        if (next.rows == 0) continue;
        const int pieces = (next.k / 8 + kPieceChunks - 1) / kPieceChunks;
        const int next_gw = place(q);
        const Work first = work_at(next, next_gw, warps, pieces, 0);
        if (first.valid) issue(next, first, lane, wa);
        held = 1;
        if constexpr (kLookahead > 1) {
          const Work second = work_at(next, next_gw, warps, pieces, 1);
          if (second.valid) issue(next, second, lane, wb);
          held = 2;
        }
      }
    }
    if constexpr (kBarrier) {
      if (threadIdx.x == 0) {
        const unsigned target = static_cast<unsigned>(p + 1) * gridDim.x;
        while (load_acquire(counter) < target) {
        }
      }
      __syncthreads();
    }
  }
}

template <bool kBarrier, int kLookahead>
int resident_blocks() {
  int per_sm = 0;
  int device = 0;
  int sms = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, step_stream_kernel<kBarrier, kLookahead>, kThreads, 0) !=
          cudaSuccess ||
      cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 0;
  }
  return per_sm * sms;
}

template <bool kBarrier, int kLookahead>
cudaError_t launch(const StreamPhase* phases, int count, unsigned* counter, bool rotate, cudaStream_t stream) {
  const int blocks = step_stream_blocks();
  if (blocks <= 0) return cudaErrorInvalidConfiguration;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;  // every block resident: the barrier needs it
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, step_stream_kernel<kBarrier, kLookahead>, phases, count, counter, rotate);
}

}  // namespace

int step_stream_blocks() {
  static const int blocks =
      std::min({resident_blocks<false, 0>(), resident_blocks<false, 1>(), resident_blocks<false, 2>(),
                resident_blocks<true, 0>(), resident_blocks<true, 1>(), resident_blocks<true, 2>()});
  return blocks;
}

cudaError_t step_stream_launch(const StreamPhase* phases, int count, StepSync sync, unsigned* counter,
                               cudaStream_t stream) {
  if (sync.lookahead < 0 || sync.lookahead > 2) return cudaErrorInvalidValue;
  const cudaError_t zeroed = cudaMemsetAsync(counter, 0, sizeof(unsigned), stream);
  if (zeroed != cudaSuccess) return zeroed;
  switch (sync.lookahead + (sync.barrier ? 3 : 0)) {
    case 0: return launch<false, 0>(phases, count, counter, sync.rotate, stream);
    case 1: return launch<false, 1>(phases, count, counter, sync.rotate, stream);
    case 2: return launch<false, 2>(phases, count, counter, sync.rotate, stream);
    case 3: return launch<true, 0>(phases, count, counter, sync.rotate, stream);
    case 4: return launch<true, 1>(phases, count, counter, sync.rotate, stream);
    case 5: return launch<true, 2>(phases, count, counter, sync.rotate, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace gearbox::bench
