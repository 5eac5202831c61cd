// CUDA KV-cache write (kv_cache.cuh): the new tokens' K and V rows into the caches at their
// positions.

#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/attention_common.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
using namespace detail;  // the attention families' internals (attention_common.cuh)
namespace {

// ---- KV-cache write ------------------------------------------------------------------------------

constexpr int kCacheWriteThreads = 256;

/// grid: T blocks of 256 threads; block t copies row t of k and v (float4 when kVec).
template <bool kVec>
__global__ void __launch_bounds__(kCacheWriteThreads)
    kv_cache_write_kernel(const float* k, const float* v, const void* positions, bool pos_i64, int64_t width,
                          float* k_cache, float* v_cache, int64_t max_ctx, int* error_flag, CacheSlots slots) {
  allow_next_kernel();
  wait_for_prior_kernels();
  const int64_t t = blockIdx.x;
  const int64_t p = index_at(positions, pos_i64, t);
  if (!position_valid(p, max_ctx)) {
    if (threadIdx.x == 0 && error_flag != nullptr && !is_padding(slots, p)) atomicExch(error_flag, 1);
    return;
  }
  const int64_t row = slot_first_row(slots, t, max_ctx) + p;
  const float* k_row = k + t * width;
  const float* v_row = v + t * width;
  float* k_dst = k_cache + row * width;
  float* v_dst = v_cache + row * width;
  if constexpr (kVec) {
    const int n4 = static_cast<int>(width / 4);  // width < 2^31 (checked by the launcher)
    for (int i = static_cast<int>(threadIdx.x); i < n4; i += kCacheWriteThreads) {
      reinterpret_cast<float4*>(k_dst)[i] = reinterpret_cast<const float4*>(k_row)[i];
      reinterpret_cast<float4*>(v_dst)[i] = reinterpret_cast<const float4*>(v_row)[i];
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < width; i += kCacheWriteThreads) {
      k_dst[i] = k_row[i];
      v_dst[i] = v_row[i];
    }
  }
}

}  // namespace

cudaError_t kv_cache_write(const float* k, const float* v, const void* positions, bool pos_i64, int64_t T,
                           int64_t width, float* k_cache, float* v_cache, int64_t max_ctx, int* error_flag,
                           const Launch& launch, const CacheSlots& slots) {
  if (T < 0 || width < 0 || max_ctx < 0 || T > INT32_MAX || width > INT32_MAX || slots.seq < 1) {
    return cudaErrorInvalidValue;
  }
  if (T == 0 || width == 0) return cudaSuccess;
  const bool vec = width % 4 == 0 && aligned16(k) && aligned16(v) && aligned16(k_cache) && aligned16(v_cache);
  const auto blocks = static_cast<unsigned>(T);
  if (vec) {
    launch_kernel(kv_cache_write_kernel<true>, blocks, kCacheWriteThreads, 0, launch, k, v, positions, pos_i64, width,
                  k_cache, v_cache, max_ctx, error_flag, slots);
  } else {
    launch_kernel(kv_cache_write_kernel<false>, blocks, kCacheWriteThreads, 0, launch, k, v, positions, pos_i64, width,
                  k_cache, v_cache, max_ctx, error_flag, slots);
  }
  return cudaGetLastError();
}

}  // namespace gearbox::cuda
