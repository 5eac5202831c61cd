// CUDA embedding lookup (embedding.cuh).
//
//   embedding      ids [count], table [vocab, hidden] W  -> out [count, hidden] f32
//
// Memory-bound: 16-byte loads of the table row when it is 16-byte aligned, else one element
// a step.

#include <math_constants.h>

#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/embedding.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
namespace {

constexpr int kThreads = 256;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Row i of out: table[ids[i]] * scale, or NaN and the error flag for an id outside the
/// vocabulary. kVec: 16 bytes of the table (4 or 8 elements) per step.
/// grid: count blocks of 256 threads.
template <typename W, bool kVec>
__global__ void __launch_bounds__(kThreads)
    embedding_kernel(const void* ids, bool ids_i64, const W* table, int64_t vocab, int64_t hidden, float scale,
                     float* out, int* error_flag) {
  allow_next_kernel();
  wait_for_prior_kernels();
  const int64_t i = blockIdx.x;
  const int64_t id = index_at(ids, ids_i64, i);
  float* o = out + i * hidden;
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0 && error_flag != nullptr) atomicExch(error_flag, 1);
    for (int64_t d = threadIdx.x; d < hidden; d += kThreads) o[d] = CUDART_NAN_F;
    return;
  }
  const W* row = table + id * hidden;
  if constexpr (kVec) {
    constexpr int kElems = 16 / static_cast<int>(sizeof(W));
    for (int64_t c = threadIdx.x; c < hidden / kElems; c += kThreads) {
      const uint4 raw = reinterpret_cast<const uint4*>(row)[c];
      W w[kElems];
      static_assert(sizeof(w) == sizeof(raw));
      memcpy(w, &raw, sizeof(raw));
#pragma unroll
      for (int q = 0; q < kElems / 4; ++q) {
        reinterpret_cast<float4*>(o + c * kElems)[q] =
            make_float4(to_f32(w[4 * q]) * scale, to_f32(w[4 * q + 1]) * scale, to_f32(w[4 * q + 2]) * scale,
                        to_f32(w[4 * q + 3]) * scale);
      }
    }
  } else {
    for (int64_t d = threadIdx.x; d < hidden; d += kThreads) o[d] = to_f32(row[d]) * scale;
  }
}

}  // namespace

template <typename W>
cudaError_t embedding(const void* ids, bool ids_i64, int64_t count, const W* table, int64_t vocab, int64_t hidden,
                      float scale, float* out, int* error_flag, const Launch& launch) {
  if (count < 0 || hidden < 0 || vocab < 0 || count > INT32_MAX) return cudaErrorInvalidValue;
  if (count == 0 || hidden == 0) return cudaSuccess;
  constexpr int64_t kElems = 16 / static_cast<int64_t>(sizeof(W));
  const auto blocks = static_cast<unsigned>(count);
  if (hidden % kElems == 0 && aligned16(table) && aligned16(out)) {
    launch_kernel(embedding_kernel<W, true>, blocks, kThreads, 0, launch, ids, ids_i64, table, vocab, hidden, scale,
                  out, error_flag);
  } else {
    launch_kernel(embedding_kernel<W, false>, blocks, kThreads, 0, launch, ids, ids_i64, table, vocab, hidden, scale,
                  out, error_flag);
  }
  return cudaGetLastError();
}

#define GEARBOX_INSTANTIATE_EMBEDDING(W)                                                                         \
  template cudaError_t embedding<W>(const void*, bool, int64_t, const W*, int64_t, int64_t, float, float*, int*, \
                                    const Launch&);
GEARBOX_INSTANTIATE_EMBEDDING(float)
GEARBOX_INSTANTIATE_EMBEDDING(__nv_bfloat16)
GEARBOX_INSTANTIATE_EMBEDDING(__half)
#undef GEARBOX_INSTANTIATE_EMBEDDING

}  // namespace gearbox::cuda
