#include "devices/cuda/host_outputs.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/log.h"
#include "devices/cuda/host_progress.h"

namespace gearbox::cuda {
namespace {

using internal::DeviceBuffer;
using internal::LandingCopy;
using internal::StreamImpl;

/// How an output reaches host memory, for the debug line that names a change of route.
enum class Route { kCopy, kStoredIntoCaller, kStoredIntoStaging, kStoredIntoStagingCopiedOn };

const char* route_name(Route r) {
  switch (r) {
    case Route::kCopy: return "a copy after the network";
    case Route::kStoredIntoCaller: return "the kernels' stores into the caller's memory";
    case Route::kStoredIntoStaging: return "the kernels' stores into page-locked staging";
    case Route::kStoredIntoStagingCopiedOn:
      return "the kernels' stores into page-locked staging, copied on to the caller's memory as they land";
  }
  return "?";
}

class CudaHostOutputs final : public internal::HostOutputs {
 public:
  CudaHostOutputs(const internal::DeviceBackend& device, const internal::HostOutputsSpec& spec, HostOutputRoutes routes)
      : device_(device),
        net_(*spec.net),
        max_bytes_(spec.max_bytes),
        routes_(std::move(routes)),
        pinned_source_(device) {
    const size_t outputs = max_bytes_.size();
    routes_.progress->assign(outputs, {});
    calls_.resize(outputs);
    pinned_.resize(outputs);
    for (size_t o = 0; o < outputs; ++o) slots_.emplace_back(nullptr, [](void*) {});
    last_dst_.resize(outputs, nullptr);
    last_route_.resize(outputs, std::nullopt);
  }

  Status allocate_staging() {
    for (const int64_t bytes : max_bytes_) {
      Result<DeviceBuffer> buf = device_.allocate(bytes);
      if (!buf.ok()) return buf.status();
      staging_.push_back(std::move(*buf));
    }
    return {};
  }

  void* bind(size_t o, int32_t profile, MemoryKind memory, void* dst, int64_t bytes) override {
    Call& c = calls_[o];
    c = Call{};
    (*routes_.progress)[o] = {};
    if (memory != MemoryKind::kHost) return dst;
    c.host = true;
    LandingCopy& a = c.arrival;
    a.dst = dst;
    a.bytes = bytes;
    c.kind = routes_.memory_kind(dst, bytes);
    void* address = staging_[o].get();
    if (routes_.writes_to_host[static_cast<size_t>(profile)][o] && bytes > 0) {
      if (c.kind == HostMemoryKind::kMapped && dst == last_dst_[o]) {
        c.by_kernels = true;
        address = dst;
      } else if (c.kind == HostMemoryKind::kPageable) {
        if (void* pinned = pinned_staging(o, bytes); pinned != nullptr) {
          c.by_kernels = true;
          a.landed = pinned;
          address = pinned;
          a.slots = bytes >= kHostProgressMinBytes ? progress_slots(o) : nullptr;
          a.count = a.slots != nullptr ? kHostProgressSlots : 0;
        }
      }
    }
    last_dst_[o] = dst;
    if (a.slots != nullptr) {
      // Nothing of the output is there yet; no earlier work of the context runs any more.
      std::memset(a.slots, 0, static_cast<size_t>(a.count) * sizeof(uint32_t));
      (*routes_.progress)[o] = OutputProgress{a.slots, a.count, kHostProgressEvery};
    }
    log_route(o, c);
    return address;
  }

  Status deliver(StreamImpl& stream) override {
    // Each host output the kernels did not store lands in page-locked memory (a DMA at full
    // link speed): the caller's own where it is page-locked, else the staging, copied to the
    // caller's after the drain; without either, straight into the caller's memory.
    for (size_t o = 0; o < calls_.size(); ++o) {
      Call& c = calls_[o];
      if (!c.host || c.by_kernels) continue;
      LandingCopy& a = c.arrival;
      void* const landed = c.kind != HostMemoryKind::kPageable ? nullptr : pinned_staging(o, a.bytes);
      a.landed = landed;
      Status copied = device_.enqueue_copy(landed != nullptr ? landed : a.dst, staging_[o].get(), a.bytes, stream);
      if (!copied.ok()) {
        (void)stream.synchronize();  // the network is in flight: never return with it untracked
        return copied;
      }
    }
    copy_on_as_it_lands(stream);
    GEARBOX_RETURN_IF_ERROR(stream.synchronize());
    for (const Call& c : calls_) {
      const LandingCopy& a = c.arrival;
      if (!c.host || a.landed == nullptr) continue;
      std::memcpy(static_cast<char*>(a.dst) + a.copied, static_cast<const char*>(a.landed) + a.copied,
                  static_cast<size_t>(a.bytes - a.copied));
    }
    return {};
  }

 private:
  /// One output of this call (bind): in host memory or not, the kind of the caller's memory,
  /// whether the kernels store it themselves, and in `arrival` the caller's memory, its bytes,
  /// the page-locked memory it lands in first (null: straight into the caller's) and its
  /// progress slots (the bytes below arrival.copied are in the caller's memory already).
  struct Call {
    bool host = false;
    bool by_kernels = false;
    HostMemoryKind kind = HostMemoryKind::kPageable;
    LandingCopy arrival;
  };
  struct Pinned {
    DeviceBuffer buffer{nullptr, [](void*) {}};
    int64_t bytes = 0;
  };

  /// While the network runs, an output whose kernels say how much of it is there is copied on
  /// to the caller as it lands, so that only its last part waits for the drain. Stops when
  /// every such output is whole, or the work is done and nothing more landed.
  void copy_on_as_it_lands(StreamImpl& stream) {
    const bool any =
        std::any_of(calls_.begin(), calls_.end(), [](const Call& c) { return c.arrival.slots != nullptr; });
    if (!any || !stream.record(done_).ok()) return;
    for (;;) {
      bool moved = false;
      bool whole = true;
      for (Call& c : calls_) {
        if (c.arrival.slots == nullptr) continue;
        moved = internal::copy_landed(c.arrival) || moved;
        whole = whole && c.arrival.copied == c.arrival.bytes;
      }
      if (whole || (!moved && done_.query())) return;
      if (!moved) internal::spin_pause();
    }
  }

  /// Page-locked staging of at least `bytes` for output `o` (grown on demand), or null: the
  /// output then goes to the caller's memory directly.
  void* pinned_staging(size_t o, int64_t bytes) {
    Pinned& p = pinned_[o];
    if (p.buffer != nullptr && p.bytes >= bytes) return p.buffer.get();
    // Grow geometrically up to the output's largest size, so that alternating profiles do
    // not reallocate on every call.
    const int64_t want = std::max(bytes, std::min(2 * p.bytes, max_bytes_[o]));
    if (!pinned_source_.take(p.buffer, want,
                             "output " + std::to_string(o) + ": copying to the caller's memory directly")) {
      return nullptr;
    }
    p.bytes = want;
    return p.buffer.get();
  }

  /// Output `o`'s progress slots (allocated at their first use), or null where they cannot
  /// be had (from then on, no output has any).
  uint32_t* progress_slots(size_t o) {
    if (progress_unavailable_) return nullptr;
    if (slots_[o] == nullptr && !pinned_source_.take(slots_[o], int64_t{kHostProgressSlots} * 4,
                                                     "the progress slots of output " + std::to_string(o) +
                                                         ": it is copied once the network is done")) {
      progress_unavailable_ = true;
      return nullptr;
    }
    return static_cast<uint32_t*>(slots_[o].get());
  }

  void log_route(size_t o, const Call& c) {
    const Route route = !c.by_kernels                 ? Route::kCopy
                        : c.arrival.landed == nullptr ? Route::kStoredIntoCaller
                        : c.arrival.slots == nullptr  ? Route::kStoredIntoStaging
                                                      : Route::kStoredIntoStagingCopiedOn;
    if (last_route_[o] == route) return;
    GEARBOX_LOG(kDebug, "output '%s' reaches host memory by %s",
                net_.tensors[static_cast<size_t>(net_.outputs[o])].name.c_str(), route_name(route));
    last_route_[o] = route;
  }

  const internal::DeviceBackend& device_;
  const ir::Network& net_;
  std::vector<int64_t> max_bytes_;  // per output
  HostOutputRoutes routes_;
  std::vector<DeviceBuffer> staging_;             // per output: device memory of its largest size
  std::vector<Call> calls_;                       // per output, as bound for this call
  std::vector<Pinned> pinned_;                    // per output, allocated at its first use
  std::vector<DeviceBuffer> slots_;               // per output: its progress slots, allocated at their first use
  std::vector<const void*> last_dst_;             // per output: the caller's memory at its last host call
  std::vector<std::optional<Route>> last_route_;  // per output: how it reached host memory last
  internal::PinnedSource pinned_source_;          // the page-locked buffers of pinned_ and slots_
  bool progress_unavailable_ = false;
  internal::Event done_;  // recorded after the network while outputs are copied on as they land
};

}  // namespace

Result<std::unique_ptr<internal::HostOutputs>> make_host_outputs(const internal::DeviceBackend& device,
                                                                 const internal::HostOutputsSpec& spec,
                                                                 HostOutputRoutes routes) {
  GEARBOX_CHECK(spec.net != nullptr && routes.progress != nullptr && routes.memory_kind);
  GEARBOX_CHECK(routes.writes_to_host.size() == spec.tactics.size());
  for (const std::vector<bool>& profile : routes.writes_to_host) GEARBOX_CHECK(profile.size() == spec.max_bytes.size());
  auto outputs = std::make_unique<CudaHostOutputs>(device, spec, std::move(routes));
  GEARBOX_RETURN_IF_ERROR(outputs->allocate_staging());
  return std::unique_ptr<internal::HostOutputs>(std::move(outputs));
}

}  // namespace gearbox::cuda
