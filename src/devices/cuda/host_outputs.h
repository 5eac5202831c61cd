// How the CUDA device brings a call's host outputs to the caller's memory (HostOutputs,
// runtime/device_backend.h). A linear's output that no node reads (the logits), run by a GEMV,
// crosses the host link on the kernel's own stores into mapped page-locked memory, overlapped
// with its weight stream, instead of by a copy after the network:
//   - into the caller's memory, when it is mapped and is the memory of the caller's previous
//     call (a new address keeps the copy, so that a caller alternating buffers does not make a
//     captured graph be captured again);
//   - else, for pageable memory, into page-locked staging, which the host copies on to the
//     caller's memory as the GEMV's progress slots say it lands (an output of at least
//     kHostProgressMinBytes), or after the drain.
// Any other host output is written into device staging and copied after the network: by DMA
// straight into the caller's memory when that is page-locked, else through page-locked
// staging (copied to the caller's memory after the drain).
//
// The routes are plain C++ over the DeviceBackend interface (the CUDA calls are the
// device's), built without CUDA too, so that their tests run on the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ir/network.h"
#include "runtime/device_backend.h"

namespace gearbox::cuda {

/// What host memory is to the CUDA device, each kind including the one before: page-locked
/// (cudaHostAlloc, or registered by its owner), so that a copy into it is a DMA with no
/// staging; mapped, so that kernels can also store into it at the host's addresses.
enum class HostMemoryKind { kPageable, kPageLocked, kMapped };

/// Where the GEMV that stores a host output says how much of it is there (cuda::GemvProgress,
/// its kernel side): `count` uint32 slots of mapped host memory, zeroed before the call, each
/// moved by its block every `every` of its units. No slots: no progress.
struct OutputProgress {
  uint32_t* slots = nullptr;
  int32_t count = 0;
  int32_t every = 0;
};

/// Progress slots of a host output: a GEMV with progress runs at most this many blocks, more
/// than the resident grid of any geometry on current GPUs.
constexpr int32_t kHostProgressSlots = 1024;
/// Every how many of its units a block moves its progress slot. Each move waits for the
/// block's stores to reach the host, so that a move after every unit would cost the kernel
/// more than the copy it hides.
constexpr int32_t kHostProgressEvery = 8;
/// The smallest pageable host output that is copied on as it lands: below it, what the
/// progress costs the kernels and the host outweighs the copy after the drain that it hides.
constexpr int64_t kHostProgressMinBytes = int64_t{256} << 10;

/// What the CUDA device tells its HostOutputs beyond the spec.
struct HostOutputRoutes {
  /// Per profile, per network output: writes_output_to_host for the profile's tactics.
  std::vector<std::vector<bool>> writes_to_host;
  /// What host memory [p, p + bytes) is: host_memory_kind.
  std::function<HostMemoryKind(const void* p, int64_t bytes)> memory_kind;
  /// Per network output: the progress its GEMV makes this call, in the context's device state
  /// where the kernels read it when the network is enqueued. Sized by make_host_outputs, set by
  /// every bind; must outlive the HostOutputs.
  std::vector<OutputProgress>* progress = nullptr;
};

/// The CUDA device's HostOutputs for `spec`: device staging, page-locked staging and progress
/// slots from `device` (allocate, allocate_pinned: page-locked staging must be mapped), copies
/// by device.enqueue_copy. Errors: those of device.allocate (the device staging, allocated
/// here; the page-locked memory is allocated at its first use, and where it cannot be, the
/// output is copied instead, with a warning).
Result<std::unique_ptr<internal::HostOutputs>> make_host_outputs(const internal::DeviceBackend& device,
                                                                 const internal::HostOutputsSpec& spec,
                                                                 HostOutputRoutes routes);

/// What host memory [p, p + bytes) is to the CUDA device: the driver's pointer attributes of
/// its first byte, and of its last where the first is page-locked (a caller's buffer lies in
/// one allocation or registration, page-locked throughout or not at all; a range running
/// past it is pageable). kPageable for no bytes, and in a build without CUDA.
HostMemoryKind host_memory_kind(const void* p, int64_t bytes);

/// Whether the kernels that `tactics` (one per node) choose for `net` store network output
/// `output` into mapped host memory themselves when it is bound there, so that it crosses to
/// the host on their stores: a linear whose output no node reads (nor is it an input), run by
/// a GEMV, which stores each element once and reads none back. false for an index outside the
/// outputs, too few tactics, and in a build without CUDA.
bool writes_output_to_host(const ir::Network& net, std::span<const uint32_t> tactics, size_t output);

}  // namespace gearbox::cuda
