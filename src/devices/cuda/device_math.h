// Device helpers shared by the CUDA kernels (include from .cu files only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace gearbox::cuda {

/// A weight element as f32.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

/// Two 16-bit floats packed in a 32-bit word as they lie in memory (element 0 in the low
/// half), as f32; exact.
__device__ __forceinline__ float2 unpack2(uint32_t w, __nv_bfloat16) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 unpack2(uint32_t w, __half) {
  return make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu))),
                     __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16))));
}

/// *y = x stored as the element type of y, rounded to nearest even (convert_f32_to's rounding).
__device__ __forceinline__ void convert_one(float x, float* y) { *y = x; }
__device__ __forceinline__ void convert_one(float x, __nv_bfloat16* y) { *y = __float2bfloat16_rn(x); }
__device__ __forceinline__ void convert_one(float x, __half* y) { *y = __float2half_rn(x); }

/// The address PTX's shared-memory instructions take for p, a generic pointer into shared
/// memory.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16 bytes of global memory at src into shared memory at dst, asynchronously (sm_80+:
/// complete after cp_async_wait_*). fill = false reads nothing and writes 16 zero bytes.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool fill = true) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst)), "l"(src), "r"(fill ? 16 : 0)
               : "memory");
}
/// Closes the group of this thread's cp_async_16 issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
/// Waits for every cp_async_16 this thread issued.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/// The sum over the 32 lanes of a warp; every lane gets it.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// The sum of v over a block of kThreads threads (whole warps), returned to every thread;
/// red [kThreads / 32] is shared scratch that the next sum must not write before every
/// thread has read this one (give it other scratch, or a barrier first). One barrier.
template <int kThreads>
__device__ __forceinline__ float block_sum_to_all(float v, float* red) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float s = red[0];
#pragma unroll
  for (int i = 1; i < kThreads / 32; ++i) s += red[i];
  return s;
}

/// 16 bytes of weights that no other thread writes, bypassing L1 (read once) with a 256-byte
/// L2 prefetch: ld.global.nc.L1::no_allocate needs sm_70+ and .L2::256B sm_80+ (both targets).
__device__ __forceinline__ uint4 load_stream_16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/// c[16 x 8] += a[16 x 16] b[16 x 8] on tensor cores (mma.sync, sm_80+), bf16 operands, f32
/// accumulators, in the PTX ISA's fragment layouts for m16n8k16.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two floats as bf16 (rounded to nearest even) in a 32-bit word, `lo` in the low half (the
/// element an mma fragment takes first).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
}

/// The GPU's %globaltimer, in ns (spins, traces and timeouts).
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// 1 / sqrt(mean + eps) of a row's sum of squares, as the CPU computes it (no rsqrtf).
__device__ __forceinline__ float inverse_rms(float sum_squares, int dim, float eps) {
  return 1.0f / sqrtf(sum_squares / static_cast<float>(dim) + eps);
}

/// Element i of an i32 or i64 array (token ids, positions).
__device__ __forceinline__ int64_t index_at(const void* values, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t*>(values)[i] : static_cast<const int32_t*>(values)[i];
}

/// RoPE's inverse frequency for pair i (dims i and i + head_dim / 2), as the CPU computes it
/// when no uploaded table (cpu::rope_inv_freq's values) is at hand. The CPU takes std::pow in
/// f32 (glibc powf, within an ulp of exact); CUDA's powf is only within a few ulps, and an
/// ulp of inv_freq moves the angle at position 4096 by ~2e-4, so pow is taken in double and
/// rounded once: the same f32 value in practice, at the cost of a double-precision pow.
__device__ __forceinline__ float rope_inv_freq(int i, int head_dim, float theta) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
  const float power = static_cast<float>(pow(static_cast<double>(theta), static_cast<double>(exponent)));
  return 1.0f / power;
}

/// cos and sin of the angle pos * position_scale * inv_freq, in f32 as on the CPU.
__device__ __forceinline__ void rope_angle_cos_sin(int64_t pos, float position_scale, float inv_freq, float* c,
                                                   float* s) {
  sincosf(static_cast<float>(pos) * position_scale * inv_freq, s, c);
}

/// Both: the cos and sin of pair i's angle at position pos.
__device__ __forceinline__ void rope_cos_sin(int64_t pos, int i, int head_dim, float theta, float position_scale,
                                             float* c, float* s) {
  rope_angle_cos_sin(pos, position_scale, rope_inv_freq(i, head_dim, theta), c, s);
}

/// The pair (a, b) rotated by the angle of (c, s), the products rounded separately (no FMA
/// contraction), as on the CPU.
__device__ __forceinline__ void rope_rotate(float a, float b, float c, float s, float* ya, float* yb) {
  *ya = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  *yb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

/// A rotation pair (a, b) of a head normalized as rms_norm does (x * inv_rms * (w + offset),
/// the weights as f32), then rotated as rope() does: head_norm_rope's arithmetic, which every
/// kernel that computes the q / k norms and RoPE shares so that none depends on which ran.
__device__ __forceinline__ void norm_rotate(float a, float b, float inv_rms, float w_a, float w_b, float offset,
                                            float c, float s, float* ya, float* yb) {
  rope_rotate(a * inv_rms * (w_a + offset), b * inv_rms * (w_b + offset), c, s, ya, yb);
}

/// gelu_tanh(g) * u and silu(g) * u, as the CPU kernels compute them (CUDA's tanhf, expf).
__device__ __forceinline__ float gelu_tanh_times(float g, float u) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * u;
}
__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

}  // namespace gearbox::cuda
