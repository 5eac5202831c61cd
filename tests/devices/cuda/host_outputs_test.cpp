// The CUDA device's host-output routes (devices/cuda/host_outputs.h) on the CPU: the CPU
// backend stands in for the device, with page-locked memory of its own and a table of which
// host memory is mapped, and a task on its stream stands in for the network, storing the
// output where bind put it (and raising the progress slots as the logits GEMV does). Each
// case checks the address bind chooses, what the kernels are told, and the bytes the caller
// gets, inside its view only. The GPU engine tests check the same routes end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "devices/cuda/host_outputs.h"
#include "gearbox/logging.h"
#include "runtime/device_backend.h"

namespace gearbox::cuda {
namespace {

using internal::DeviceBackend;
using internal::DeviceBuffer;
using internal::StreamImpl;

/// The CPU backend with page-locked memory (every allocation mapped) that can be made to run
/// out; everything else forwarded.
class PinnedCpu final : public DeviceBackend {
 public:
  DeviceKind kind() const noexcept override { return cpu_->kind(); }
  std::string device_name() const override { return cpu_->device_name(); }
  std::string library_versions() const override { return cpu_->library_versions(); }
  DataType storage_type(DataType d) const noexcept override { return cpu_->storage_type(d); }
  std::vector<internal::TacticInfo> tactics(const ir::Node& n) const override { return cpu_->tactics(n); }
  bool tactic_valid(const ir::Network& net, const ir::Node& n, uint32_t t, std::span<const Dims> d) const override {
    return cpu_->tactic_valid(net, n, t, d);
  }
  int64_t scratch_bytes(const ir::Network& net, const ir::Node& n, uint32_t t, std::span<const Dims> d) const override {
    return cpu_->scratch_bytes(net, n, t, d);
  }
  Result<std::shared_ptr<internal::DeviceWeights>> upload_weights(const ir::Network& net,
                                                                  std::span<const uint8_t> p) const override {
    return cpu_->upload_weights(net, p);
  }
  Result<DeviceBuffer> allocate(int64_t bytes) const override { return cpu_->allocate(bytes); }
  Result<DeviceBuffer> allocate_pinned(int64_t bytes) const override {
    if (pinned_left_ == 0) return resource_exhausted("no page-locked memory left");
    --pinned_left_;
    void* p = ::operator new (static_cast<size_t>(std::max<int64_t>(bytes, 1)), std::align_val_t{64});
    mapped_.push_back({static_cast<const char*>(p), bytes});
    return DeviceBuffer(p, [](void* q) { ::operator delete (q, std::align_val_t{64}); });
  }
  Result<std::unique_ptr<internal::DeviceContextState>> create_context_state(int32_t p) const override {
    return cpu_->create_context_state(p);
  }
  Result<std::shared_ptr<StreamImpl>> create_stream() const override { return cpu_->create_stream(); }
  Status copy_from_host(void* d, const void* s, int64_t b, StreamImpl& st) const override {
    return cpu_->copy_from_host(d, s, b, st);
  }
  Status enqueue_copy(void* d, const void* s, int64_t b, StreamImpl& st) const override {
    return cpu_->enqueue_copy(d, s, b, st);
  }
  Status enqueue_network(const ir::Network& net, const internal::DeviceWeights& w, internal::NetworkLaunch l,
                         StreamImpl& st) const override {
    return cpu_->enqueue_network(net, w, std::move(l), st);
  }
  Status run_node(const ir::Network& net, const internal::DeviceWeights& w, size_t n, uint32_t t,
                  const internal::NodeArgs& a) const override {
    return cpu_->run_node(net, w, n, t, a);
  }

  /// What [p, p + bytes) is: mapped inside one of this device's page-locked allocations or a
  /// caller's buffer marked mapped, page-locked inside one marked so, else pageable.
  HostMemoryKind memory_kind(const void* p, int64_t bytes) const {
    const auto inside = [&](const Range& r) {
      const auto* c = static_cast<const char*>(p);
      return c >= r.base && c + bytes <= r.base + r.bytes;
    };
    if (bytes > 0 && std::any_of(mapped_.begin(), mapped_.end(), inside)) return HostMemoryKind::kMapped;
    if (bytes > 0 && std::any_of(locked_.begin(), locked_.end(), inside)) return HostMemoryKind::kPageLocked;
    return HostMemoryKind::kPageable;
  }
  void mark_mapped(const void* p, int64_t bytes) { mapped_.push_back({static_cast<const char*>(p), bytes}); }
  void mark_locked(const void* p, int64_t bytes) { locked_.push_back({static_cast<const char*>(p), bytes}); }
  /// How many more allocate_pinned calls succeed.
  void set_pinned_left(int n) { pinned_left_ = n; }

 private:
  struct Range {
    const char* base;
    int64_t bytes;
  };
  std::shared_ptr<const DeviceBackend> cpu_ = internal::cpu_backend();
  mutable std::vector<Range> mapped_;
  std::vector<Range> locked_;
  mutable int pinned_left_ = 1 << 20;
};

/// The value of byte i of every output.
uint8_t final_byte(int64_t i) { return static_cast<uint8_t>((i * 31 + 7) % 251); }

/// Two outputs: the logits (stored by the kernels on profile 0, not on profile 1) and another
/// (never), `bytes` each at most.
struct Fixture {
  explicit Fixture(int64_t bytes) : max_bytes(bytes) {
    net.tensors = {{"x", DataType::kF32}, {"logits", DataType::kF32}, {"other", DataType::kF32}};
    net.outputs = {1, 2};
    internal::HostOutputsSpec spec;
    spec.net = &net;
    spec.tactics.resize(2);
    spec.max_bytes = {bytes, bytes};
    HostOutputRoutes routes;
    routes.writes_to_host = {{true, false}, {false, false}};
    routes.memory_kind = [this](const void* p, int64_t n) { return device.memory_kind(p, n); };
    routes.progress = &progress;
    Result<std::unique_ptr<internal::HostOutputs>> made = make_host_outputs(device, spec, std::move(routes));
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    if (made.ok()) outputs = std::move(*made);
    Result<std::shared_ptr<StreamImpl>> s = device.create_stream();
    EXPECT_TRUE(s.ok());
    if (s.ok()) stream = std::move(*s);
  }

  /// The network: stores `bytes` of output `o` at `address`, 64-byte units served in turn by
  /// four blocks that raise their progress slots (where the output has any) past what they
  /// stored, every other unit and after their last, as the logits GEMV does.
  void run_network(size_t o, void* address, int64_t bytes) {
    const OutputProgress p = progress[o];
    ASSERT_TRUE(stream
                    ->enqueue([=]() -> Status {
                      constexpr int64_t kUnit = 64;
                      constexpr int32_t kBlocks = 4;
                      auto* out = static_cast<uint8_t*>(address);
                      const auto raise = [&](int32_t b, int64_t to) {
                        std::atomic_ref<uint32_t>(p.slots[b])
                            .store(static_cast<uint32_t>(std::min(to, bytes)), std::memory_order_release);
                      };
                      if (p.slots != nullptr) {
                        for (int32_t b = kBlocks; b < p.count; ++b) raise(b, bytes);
                      }
                      const int64_t units = (bytes + kUnit - 1) / kUnit;
                      for (int64_t u = 0; u < units; ++u) {
                        for (int64_t i = u * kUnit; i < std::min(bytes, (u + 1) * kUnit); ++i) out[i] = final_byte(i);
                        const auto b = static_cast<int32_t>(u % kBlocks);
                        const bool last = u + kBlocks >= units;
                        if (p.slots != nullptr && (last || (u / kBlocks) % p.every == p.every - 1)) {
                          raise(b, last ? bytes : (u + kBlocks) * kUnit);
                        }
                      }
                      if (p.slots != nullptr) {
                        for (int32_t b = static_cast<int32_t>(std::min<int64_t>(units, kBlocks)); b < kBlocks; ++b) {
                          raise(b, bytes);
                        }
                      }
                      return Status();
                    })
                    .ok());
  }

  PinnedCpu device;
  ir::Network net;
  int64_t max_bytes;
  std::vector<OutputProgress> progress;
  std::unique_ptr<internal::HostOutputs> outputs;
  std::shared_ptr<StreamImpl> stream;
};

/// Caller memory of `bytes` with a guard byte on both sides.
struct Guarded {
  explicit Guarded(int64_t bytes) : storage(static_cast<size_t>(bytes) + 2, 0xAB), n(bytes) {}
  void* view() { return storage.data() + 1; }
  /// The view holds the output and the guards are untouched.
  void expect_output() const {
    EXPECT_EQ(storage.front(), 0xAB) << "written before the view";
    EXPECT_EQ(storage.back(), 0xAB) << "written after the view";
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(storage[static_cast<size_t>(i) + 1], final_byte(i)) << "byte " << i;
  }
  std::vector<uint8_t> storage;
  int64_t n;
};

/// One call: output 0 to `dst` in host memory on `profile`, output 1 to device memory.
/// Returns where output 0 was bound.
void* call(Fixture& f, int32_t profile, void* dst, int64_t bytes) {
  std::vector<uint8_t> device_out(static_cast<size_t>(bytes));
  void* const bound = f.outputs->bind(0, profile, MemoryKind::kHost, dst, bytes);
  EXPECT_EQ(f.outputs->bind(1, profile, MemoryKind::kDevice, device_out.data(), bytes), device_out.data());
  EXPECT_EQ(f.progress[1].slots, nullptr) << "a device output has no progress";
  f.run_network(0, bound, bytes);
  const Status delivered = f.outputs->deliver(*f.stream);
  EXPECT_TRUE(delivered.ok()) << delivered.to_string();
  return bound;
}

TEST(CudaHostOutputs, AGemvStoresLargePageableOutputsIntoStagingCopiedOnAsTheyLand) {
  for (const int64_t bytes : {kHostProgressMinBytes, kHostProgressMinBytes + 13}) {
    SCOPED_TRACE(bytes);
    Fixture f(bytes + 64);
    for (int i = 0; i < 3; ++i) {
      Guarded dst(bytes);
      std::vector<uint8_t> device_out(static_cast<size_t>(bytes));
      void* const bound = f.outputs->bind(0, 0, MemoryKind::kHost, dst.view(), bytes);
      EXPECT_NE(bound, dst.view());
      EXPECT_EQ(f.device.memory_kind(bound, bytes), HostMemoryKind::kMapped) << "the kernels store into mapped memory";
      ASSERT_NE(f.progress[0].slots, nullptr);
      EXPECT_EQ(f.progress[0].count, kHostProgressSlots);
      EXPECT_EQ(f.progress[0].every, kHostProgressEvery);
      EXPECT_TRUE(std::all_of(f.progress[0].slots, f.progress[0].slots + kHostProgressSlots, [](uint32_t s) {
        return s == 0;
      })) << "slots start at 0 every call";
      (void)f.outputs->bind(1, 0, MemoryKind::kDevice, device_out.data(), bytes);
      f.run_network(0, bound, bytes);
      ASSERT_TRUE(f.outputs->deliver(*f.stream).ok());
      dst.expect_output();
    }
  }
}

TEST(CudaHostOutputs, SmallPageableOutputsAreStoredIntoStagingWithoutProgress) {
  for (const int64_t bytes : {int64_t{4}, int64_t{388}, kHostProgressMinBytes - 4}) {
    SCOPED_TRACE(bytes);
    Fixture f(bytes);
    Guarded dst(bytes);
    void* const bound = call(f, 0, dst.view(), bytes);
    EXPECT_EQ(f.device.memory_kind(bound, bytes), HostMemoryKind::kMapped);
    EXPECT_EQ(f.progress[0].slots, nullptr);
    dst.expect_output();
  }
}

TEST(CudaHostOutputs, MappedCallerMemoryIsStoredIntoFromItsSecondCallOn) {
  constexpr int64_t kBytes = 388;
  Fixture f(kBytes);
  Guarded a(kBytes), b(kBytes);
  f.device.mark_mapped(a.storage.data(), kBytes + 2);
  f.device.mark_mapped(b.storage.data(), kBytes + 2);
  // A new address keeps the copy (a captured graph would have to be captured again).
  EXPECT_NE(call(f, 0, a.view(), kBytes), a.view());
  a.expect_output();
  EXPECT_EQ(call(f, 0, a.view(), kBytes), a.view());
  EXPECT_EQ(f.progress[0].slots, nullptr) << "the caller's memory has no slots";
  a.expect_output();
  EXPECT_NE(call(f, 0, b.view(), kBytes), b.view());
  b.expect_output();
  // On a profile whose kernels do not store it, the copy.
  EXPECT_NE(call(f, 1, b.view(), kBytes), b.view());
  b.expect_output();
}

TEST(CudaHostOutputs, OutputsTheKernelsDoNotStoreAreCopiedAfterTheNetwork) {
  constexpr int64_t kBytes = 1000;
  Fixture f(kBytes);
  Guarded pageable(kBytes), locked(kBytes);
  f.device.mark_locked(locked.storage.data(), kBytes + 2);
  for (Guarded* dst : {&pageable, &locked}) {
    void* const bound = call(f, 1, dst->view(), kBytes);  // profile 1: a GEMM writes the logits
    EXPECT_NE(f.device.memory_kind(bound, kBytes), HostMemoryKind::kMapped) << "device staging";
    EXPECT_EQ(f.progress[0].slots, nullptr);
    dst->expect_output();
  }
  // Output 1, never stored by the kernels, in host memory too.
  Guarded other(kBytes);
  std::vector<uint8_t> device_out(kBytes);
  (void)f.outputs->bind(0, 0, MemoryKind::kDevice, device_out.data(), kBytes);
  void* const bound = f.outputs->bind(1, 0, MemoryKind::kHost, other.view(), kBytes);
  f.run_network(1, bound, kBytes);
  ASSERT_TRUE(f.outputs->deliver(*f.stream).ok());
  other.expect_output();
}

TEST(CudaHostOutputs, WithoutPageLockedMemoryEveryOutputIsCopiedStraightToTheCaller) {
  for (const int pinned : {0, 1}) {  // none at all; staging but no progress slots
    SCOPED_TRACE(pinned);
    Fixture f(kHostProgressMinBytes);
    f.device.set_pinned_left(pinned);
    for (int i = 0; i < 2; ++i) {
      Guarded dst(kHostProgressMinBytes);
      void* const bound = call(f, 0, dst.view(), kHostProgressMinBytes);
      EXPECT_NE(bound, dst.view());
      EXPECT_EQ(f.progress[0].slots, nullptr);
      EXPECT_EQ(f.device.memory_kind(bound, kHostProgressMinBytes),
                pinned == 1 ? HostMemoryKind::kMapped : HostMemoryKind::kPageable);
      dst.expect_output();
    }
  }
}

TEST(CudaHostOutputs, ADebugLineNamesEachChangeOfRoute) {
  constexpr int64_t kBytes = 388;
  Fixture f(kBytes);
  Guarded mapped(kBytes), pageable(kBytes);
  f.device.mark_mapped(mapped.storage.data(), kBytes + 2);
  std::vector<std::string> lines;
  const LogLevel level = log_level();
  set_log_level(LogLevel::kDebug);
  set_log_sink([&](LogLevel, std::string_view line) { lines.emplace_back(line); });
  (void)call(f, 0, mapped.view(), kBytes);
  (void)call(f, 0, mapped.view(), kBytes);
  (void)call(f, 0, mapped.view(), kBytes);
  (void)call(f, 0, pageable.view(), kBytes);
  set_log_sink(nullptr);
  set_log_level(level);
  const std::vector<std::string> want = {
      "output 'logits' reaches host memory by a copy after the network",
      "output 'logits' reaches host memory by the kernels' stores into the caller's memory",
      "output 'logits' reaches host memory by the kernels' stores into page-locked staging",
  };
  EXPECT_EQ(lines, want);
}

}  // namespace
}  // namespace gearbox::cuda
