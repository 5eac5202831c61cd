// What a dependency between two kernels costs on its own: the time from the last block of a
// producer grid finishing its work to the blocks of the grid after it going on, for the ways a
// kernel can wait for the one before it (kernel_probes handoff). No data flows beyond
// one checked word per block; the producer's blocks end at staggered times, as a GEMV's do.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gearbox::bench {

enum class HandoffWait {
  kPlain,       // the consumer launched without programmatic dependent launch
  kGridDepend,  // programmatic dependent launch, griddepcontrol.wait (what every kernel does now)
  kFlag,        // programmatic dependent launch; the producer's blocks each add 1 to a counter
                // (release), the consumer's thread 0 polls it (acquire) until all have
  kNone,        // programmatic dependent launch and no wait at all (a floor; reads may be stale)
};

/// Device buffers of one probe: per-block times (%globaltimer, ns) and the counter.
struct HandoffBuffers {
  uint64_t* producer_end = nullptr;  // [producer_blocks]: the block's payload stored
  uint64_t* consumer_go = nullptr;   // [consumer_blocks]: past the wait, the payload read
  unsigned* arrivals = nullptr;      // zeroed before each producer launch
  float* payload = nullptr;          // [producer_blocks]
  int* bad = nullptr;                // set when a consumer read a payload not yet written
};

/// Launches producer then consumer on `stream` (the counter zeroed first). The producer's
/// block b works spin_ns + (b % 8) * 64 ns; every block writes payload[b] = `stamp`.
cudaError_t handoff_launch(const HandoffBuffers& b, HandoffWait wait, int producer_blocks, int consumer_blocks,
                           uint32_t spin_ns, float stamp, cudaStream_t stream);

}  // namespace gearbox::bench
