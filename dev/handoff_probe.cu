// The kernels of kernel_probes' handoff group (handoff_probe.h).
#include "handoff_probe.h"

#include "device_sync.cuh"
#include "devices/cuda/device_math.h"
#include "devices/cuda/launch.h"

namespace gearbox::bench {
namespace {

__global__ void producer_kernel(HandoffBuffers b, uint32_t spin_ns, float stamp, bool flag) {
  cuda::allow_next_kernel();
  if (threadIdx.x != 0) return;
  const uint64_t until = cuda::global_ns() + spin_ns + uint64_t{blockIdx.x % 8} * 64;
  while (cuda::global_ns() < until) {
  }
  b.payload[blockIdx.x] = stamp;
  b.producer_end[blockIdx.x] = cuda::global_ns();
  if (flag) release_add_one(b.arrivals);
}

__global__ void consumer_kernel(HandoffBuffers b, HandoffWait wait, unsigned producers, float stamp) {
  if (wait == HandoffWait::kGridDepend) cuda::wait_for_prior_kernels();
  if (wait == HandoffWait::kFlag) {
    if (threadIdx.x == 0) {
      while (load_acquire(b.arrivals) < producers) {
      }
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  float v = 0.0f;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];"
               : "=f"(v)
               : "l"(b.payload + (blockIdx.x * 37u) % producers)
               : "memory");
  b.consumer_go[blockIdx.x] = cuda::global_ns();
  if (v != stamp && wait != HandoffWait::kNone) atomicExch(b.bad, 1);
}

}  // namespace

cudaError_t handoff_launch(const HandoffBuffers& b, HandoffWait wait, int producer_blocks, int consumer_blocks,
                           uint32_t spin_ns, float stamp, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(b.arrivals, 0, sizeof(unsigned), stream);
  if (err != cudaSuccess) return err;
  producer_kernel<<<producer_blocks, 256, 0, stream>>>(b, spin_ns, stamp, wait == HandoffWait::kFlag);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(consumer_blocks));
  config.blockDim = dim3(256);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = wait == HandoffWait::kPlain ? 0 : 1;
  return cudaLaunchKernelEx(&config, consumer_kernel, b, wait, static_cast<unsigned>(producer_blocks), stamp);
}

}  // namespace gearbox::bench
