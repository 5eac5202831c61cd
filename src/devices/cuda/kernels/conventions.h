// Conventions of the CUDA kernels (src/devices/cuda/kernels/): one pair of files per kernel
// family, <family>.cuh declaring its launchers and <family>.cu holding its kernels and their
// launchers; every family header includes this one. Each launcher mirrors the CPU kernel of
// the same name (devices/cpu/kernels.h) element for element.
//
// Design (fixed for the CUDA device): activations, KV caches and every intermediate are
// f32; weights stay in their checkpoint dtype W (bf16 is the fast path, f16 and f32 also
// work), and every weight-reading kernel is instantiated for W in {float, __nv_bfloat16,
// __half} and accumulates in f32. The generic ops (generic.cuh) also take and produce i32,
// i64 and bool (one byte) tensors, and read an element type given at run time.
//
//   // y[1, 1152] = x[1, 1152] * W[1152, 1152]^T on on.stream, nothing synchronized:
//   const Launch on{stream, true, true, &device_limits(0)};
//   cudaError_t err = gearbox::cuda::gemv<__nv_bfloat16>(x, w, nullptr, y, 1, 1152, 1152, on);
//
// Conventions shared by every launcher:
// - It enqueues its kernels as `launch` describes (launch.h: the stream, programmatic
//   dependent launch, the device's limits, from which grid sizes are computed) and returns
//   cudaGetLastError(): a launch error, or cudaErrorInvalidValue for arguments it cannot
//   serve (named per launcher). It never synchronizes and never allocates, so every
//   launcher can be captured into a CUDA graph.
// - Every pointer is device memory. Outputs must not alias inputs unless stated.
// - Vector (16-byte) loads are used when the pointers are 16-byte aligned and the row
//   lengths allow it; any other alignment or length takes a scalar path with the same
//   results, so there is no alignment requirement, only a speed one.
// - With programmatic dependent launch (devices/cuda/launch.h) a kernel may start before its
//   predecessor on the stream ends, and waits for it before touching anything the
//   predecessor writes. Stream order is what callers see.
// - Error flag: `int* error_flag` (device-accessible memory, nullable) is set to 1 with an
//   atomic by a kernel that meets bad device-resident input (a token id outside the
//   vocabulary, a position outside the KV cache). It is never cleared by a kernel: the
//   caller reads it once the work is done and clears it (the CUDA backend keeps one per
//   context in mapped host memory; DeviceBackend::take_input_fault). The bad rows are
//   poisoned with NaN (embedding, rope, attention) or skipped (KV-cache write), never
//   silently zeroed.
// - Token ids and positions are i32 or i64 (`*_i64` = true for i64), in device memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "devices/cuda/launch.h"
