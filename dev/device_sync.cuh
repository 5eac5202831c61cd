// Flags between the blocks of a grid, for the probes (a counter that blocks release and
// others acquire).
#pragma once

#include <cuda_runtime.h>

namespace gearbox::bench {

/// *p += 1 with release semantics at GPU scope: this thread's earlier writes (and those a
/// barrier before it ordered) are visible to whoever acquires the new value.
__device__ __forceinline__ void release_add_one(unsigned* p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

/// *p with acquire semantics at GPU scope (a flag another block releases).
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace gearbox::bench
