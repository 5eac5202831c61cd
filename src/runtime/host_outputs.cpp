// The default HostOutputs (DeviceBackend::create_host_outputs): the network writes a host
// output into device staging of the output's largest size, and a copy after the network
// brings it to the caller's memory.
#include <memory>
#include <vector>

#include "core/check.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {
namespace {

class CopiedHostOutputs final : public HostOutputs {
 public:
  explicit CopiedHostOutputs(const DeviceBackend& device) : device_(device) {}

  Status add_output(int64_t max_bytes) {
    Result<DeviceBuffer> buf = device_.allocate(max_bytes);
    if (!buf.ok()) return buf.status();
    staging_.push_back(std::move(*buf));
    calls_.emplace_back();
    return {};
  }

  void* bind(size_t output, int32_t /*profile*/, MemoryKind memory, void* dst, int64_t bytes) override {
    calls_[output] = {memory == MemoryKind::kHost ? dst : nullptr, bytes};
    return memory == MemoryKind::kHost ? staging_[output].get() : dst;
  }

  Status deliver(StreamImpl& stream) override {
    for (size_t o = 0; o < calls_.size(); ++o) {
      if (calls_[o].dst == nullptr) continue;
      Status copied = device_.enqueue_copy(calls_[o].dst, staging_[o].get(), calls_[o].bytes, stream);
      if (!copied.ok()) {
        (void)stream.synchronize();  // the network is in flight: never return with it untracked
        return copied;
      }
    }
    return stream.synchronize();
  }

 private:
  /// An output of this call: the caller's host memory (null: device memory) and its bytes.
  struct Call {
    void* dst = nullptr;
    int64_t bytes = 0;
  };

  const DeviceBackend& device_;
  std::vector<DeviceBuffer> staging_;  // per output
  std::vector<Call> calls_;            // per output, as bound for this call
};

}  // namespace

Result<std::unique_ptr<HostOutputs>> DeviceBackend::create_host_outputs(const HostOutputsSpec& spec) const {
  auto outputs = std::make_unique<CopiedHostOutputs>(*this);
  for (const int64_t bytes : spec.max_bytes) GEARBOX_RETURN_IF_ERROR(outputs->add_output(bytes));
  return std::unique_ptr<HostOutputs>(std::move(outputs));
}

}  // namespace gearbox::internal
