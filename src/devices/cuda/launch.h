// Kernel launches of the CUDA device, with programmatic dependent launch (PDL) on Hopper.
//
// A decode step is a chain of a few hundred small kernels, each depending on the one before
// it. Launched plainly, a kernel starts only once its predecessor has finished, so every
// launch pays its start-up and the DRAM latency of its first loads in series. With PDL
// (sm_90) a kernel is let in as soon as every block of its predecessor has started; it does
// the work that depends on nothing the predecessor writes (a GEMV streams its first weight
// tiles, a norm loads its weights) and then waits at wait_for_prior_kernels() until the
// predecessor has finished and its writes are visible.
//
// The contract every kernel launched through launch_kernel keeps (tests/devices/cuda check
// the results, and bench/gpu/run_gpu_checks.sh compares GEARBOX_CUDA_PDL=0):
// - Before wait_for_prior_kernels(), it reads only memory no kernel of the step writes
//   (weights; the decode attention, when its caller says the positions are a network input,
//   the positions and the cache rows other than the new token's) and writes nothing. A
//   network's first kernel goes out plainly (launch_next_plainly), so that such inputs are
//   complete before any kernel of the network starts.
// - Every thread of every block calls wait_for_prior_kernels() before it writes, reads an
//   activation, or exits. A block that skipped it could let the grid finish before its
//   predecessor, and the kernel after it (which waits for this grid only) would then run
//   ahead of the predecessor.
// - allow_next_kernel() may come anywhere: the next kernel still waits for this one to
//   finish before it touches what this one writes.
// PDL is used when the current device is compute capability 9.x, whose machine code in
// this build has the waits (the compute_80 PTX that other GPUs compile has none, so they
// launch plainly), and GEARBOX_CUDA_PDL is not "0". Kernels launched with <<<>>> (and
// cuBLASLt's) keep plain stream order on both sides.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "devices/cuda/switches.h"

namespace gearbox::cuda {

/// Waits until the kernels this grid depends on have finished and their writes are
/// visible; a no-op when the grid was launched plainly.
__device__ __forceinline__ void wait_for_prior_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Lets the next kernel on the stream be launched once every block of this grid has called
/// this (or exited).
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// An attribute of the device current at the call, or 0 where the query fails (its error
/// cleared).
inline int current_device_attribute(cudaDeviceAttr attr) {
  int device = 0;
  int value = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return value;
}

/// Whether this build's sm_90 machine code is what runs on the current device (compute
/// capability 9.x), so that sm_90-only kernels (griddepcontrol, clusters) may be launched.
/// Decided once per process, for the device current at the first launch.
inline bool hopper_code_runs() {
  static const bool runs = current_device_attribute(cudaDevAttrComputeCapabilityMajor) == 9;
  return runs;
}

/// Whether launch_kernel asks for programmatic dependent launch.
inline bool dependent_launch_enabled() {
  static const bool enabled = hopper_code_runs() && switch_on("GEARBOX_CUDA_PDL");
  return enabled;
}

/// Launches through launch_kernel on this thread still to go out plainly
/// (launch_next_plainly() in kernels.h; defined in kernels_elementwise.cu).
extern thread_local int t_plain_launches;

/// kernel<<<grid, block, smem, stream>>>(args...) in clusters of `cluster_x` blocks along x
/// (1: no clusters), with programmatic dependent launch when enabled and the stream is not
/// the legacy default stream (the builder's synchronous timing runs). As with <<<>>>, a
/// launch error is left for cudaGetLastError().
template <typename... Params, typename... Args>
void launch_cluster_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                           unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attributes[2] = {};
  unsigned count = 0;
  const bool plain = t_plain_launches > 0;
  if (plain) --t_plain_launches;
  if (stream != nullptr && dependent_launch_enabled() && !plain) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cluster_x > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = cluster_x;
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

/// launch_cluster_kernel without clusters.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_cluster_kernel(kernel, grid, block, smem, stream, 1u, std::forward<Args>(args)...);
}

}  // namespace gearbox::cuda
