// Kernel launches of the CUDA device: the limits of the device a kernel runs on, how one
// launcher call's kernels go out (Launch), and programmatic dependent launch (PDL) on Hopper.
//
//   const DeviceLimits& limits = device_limits(0);                  // queried once per device
//   const Launch on{stream, /*pdl=*/true, /*dependent=*/true, &limits};
//   cudaError_t err = rms_norm<float>(x, w, y, rows, dim, eps, 0.0f, on);
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
//   network's first kernel goes out plainly (Launch::dependent false), so that such inputs
//   are complete before any kernel of the network starts.
// - Every thread of every block calls wait_for_prior_kernels() before it writes, reads an
//   activation, or exits. A block that skipped it could let the grid finish before its
//   predecessor, and the kernel after it (which waits for this grid only) would then run
//   ahead of the predecessor.
// - allow_next_kernel() may come anywhere: the next kernel still waits for this one to
//   finish before it touches what this one writes.
// - ptxas may move a read-only load (__ldg, ld.global.nc) above griddepcontrol.wait, since it
//   takes the memory for unchanging while the kernel runs: what the kernels before wrote is
//   safest read with plain loads. Where a kernel reads it with __ldg, its machine code must
//   show no such load before the wait (`cuobjdump -sass`: ACQBULK is the wait).
// The caller decides whether PDL is used (the CUDA backend: GEARBOX_CUDA_PDL); it takes
// effect only where the sm_90 machine code runs (DeviceLimits::hopper_code_runs: the
// compute_80 PTX that other GPUs compile has no waits, so they launch plainly) and not on
// the legacy default stream (the builder's synchronous timing). Kernels launched with <<<>>>
// (and cuBLASLt's) keep plain stream order on both sides.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace gearbox::cuda {

/// What the launchers need to know of the device they launch on (grid sizes, shared
/// memory, which machine code runs), queried once per device by device_limits(). A field
/// whose query failed is 0 (false).
struct DeviceLimits {
  int device = 0;
  int sm_count = 0;                  ///< streaming multiprocessors
  int max_smem_per_block_optin = 0;  ///< bytes of shared memory a block may opt into
  int max_smem_per_sm = 0;           ///< bytes of shared memory of one SM
  int cc_major = 0;                  ///< compute capability
  int cc_minor = 0;
  /// Whether this build's sm_90 machine code is what runs on the device (compute capability
  /// 9.x), so that sm_90-only kernels (griddepcontrol waits, thread-block clusters) may be
  /// launched; other GPUs run the compute_80 PTX.
  bool hopper_code_runs = false;
};

/// The limits of CUDA device `device` (an index as cudaSetDevice takes), queried at the first
/// call for that device and kept for the process. Thread-safe; the reference stays valid.
const DeviceLimits& device_limits(int device);

/// How the kernels of one launcher call go out: the stream they are enqueued on, whether
/// they may start early with programmatic dependent launch, and the device's limits (never
/// null). A launcher that launches several kernels launches its first as described and the
/// ones after it as following() describes.
struct Launch {
  cudaStream_t stream = nullptr;
  /// PDL for the call's kernels after its first.
  bool pdl = false;
  /// PDL for the call's first kernel too (false for a network's first kernel, which must
  /// wait for everything enqueued ahead of it). Set only where pdl is.
  bool dependent = false;
  const DeviceLimits* limits = nullptr;

  /// The description of the call's kernels after its first.
  Launch following() const { return {stream, pdl, pdl, limits}; }
};

#if defined(__CUDACC__)  // the device side: kernels and the helpers that launch them

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

/// kernel<<<grid, block, smem, launch.stream>>>(args...) in clusters of `cluster_x` blocks
/// along x (1: no clusters), with programmatic dependent launch where launch.dependent asks
/// for it, the sm_90 code runs and the stream is not the legacy default stream. As with
/// <<<>>>, a launch error is left for cudaGetLastError().
template <typename... Params, typename... Args>
void launch_cluster_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, const Launch& launch,
                           unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if (launch.dependent && launch.stream != nullptr && launch.limits->hopper_code_runs) {
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
  config.stream = launch.stream;
  config.attrs = attributes;
  config.numAttrs = count;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

/// launch_cluster_kernel without clusters.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, const Launch& launch,
                   Args&&... args) {
  launch_cluster_kernel(kernel, grid, block, smem, launch, 1u, std::forward<Args>(args)...);
}

#endif  // defined(__CUDACC__)

}  // namespace gearbox::cuda
