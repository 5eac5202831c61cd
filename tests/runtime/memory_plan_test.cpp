// The activation memory plan: tensors that are live at once never share bytes, counting a
// fused launch (DeviceBackend::launch_group_ends) as reading all its inputs while it writes
// all its outputs. Checked on the mini Gemma-3 at a prefill shape, with every launch a
// single node and with the CUDA device's chains (norm + rope, norm + add + norm) grouped.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "gearbox/binding_names.h"
#include "ir/shape_inference.h"
#include "models/gemma3.h"
#include "runtime/device_backend.h"
#include "runtime/memory_plan.h"

namespace gearbox::internal {
namespace {

// The CPU backend with launches grouped as given (everything else forwarded).
class GroupedBackend final : public DeviceBackend {
 public:
  GroupedBackend(std::shared_ptr<const DeviceBackend> inner, std::vector<size_t> ends)
      : inner_(std::move(inner)), ends_(std::move(ends)) {}
  DeviceKind kind() const noexcept override { return inner_->kind(); }
  std::string device_name() const override { return inner_->device_name(); }
  std::string library_versions() const override { return inner_->library_versions(); }
  DataType storage_type(DataType d) const noexcept override { return inner_->storage_type(d); }
  std::vector<TacticInfo> tactics(const ir::Node& n) const override { return inner_->tactics(n); }
  bool tactic_valid(const ir::Network& net, const ir::Node& n, uint32_t t, std::span<const Dims> d) const override {
    return inner_->tactic_valid(net, n, t, d);
  }
  int64_t scratch_bytes(const ir::Network& net, const ir::Node& n, uint32_t t, std::span<const Dims> d) const override {
    return inner_->scratch_bytes(net, n, t, d);
  }
  Result<std::shared_ptr<DeviceWeights>> upload_weights(const ir::Network& net,
                                                        std::span<const uint8_t> p) const override {
    return inner_->upload_weights(net, p);
  }
  Result<DeviceBuffer> allocate(int64_t bytes) const override { return inner_->allocate(bytes); }
  Result<std::unique_ptr<DeviceContextState>> create_context_state(int32_t p) const override {
    return inner_->create_context_state(p);
  }
  Result<std::shared_ptr<StreamImpl>> create_stream() const override { return inner_->create_stream(); }
  Status copy_from_host(void* d, const void* s, int64_t b, StreamImpl& st) const override {
    return inner_->copy_from_host(d, s, b, st);
  }
  Status enqueue_copy(void* d, const void* s, int64_t b, StreamImpl& st) const override {
    return inner_->enqueue_copy(d, s, b, st);
  }
  std::vector<size_t> launch_group_ends(const ir::Network&) const override { return ends_; }
  Status enqueue_network(const ir::Network& net, const DeviceWeights& w, NetworkLaunch l,
                         StreamImpl& st) const override {
    return inner_->enqueue_network(net, w, std::move(l), st);
  }
  Status run_node(const ir::Network& net, const DeviceWeights& w, size_t n, uint32_t t,
                  const NodeArgs& a) const override {
    return inner_->run_node(net, w, n, t, a);
  }

 private:
  std::shared_ptr<const DeviceBackend> inner_;
  std::vector<size_t> ends_;
};

// Groups [rms_norm, rms_norm, rope, rope] and [rms_norm, add, rms_norm] runs, as the CUDA
// device fuses them.
std::vector<size_t> chains(const ir::Network& net) {
  std::vector<size_t> ends(net.nodes.size());
  for (size_t n = 0; n < ends.size(); ++n) ends[n] = n;
  auto kind = [&](size_t i) { return i < net.nodes.size() ? net.nodes[i].kind : ir::OpKind::kTakeLast; };
  for (size_t i = 0; i < net.nodes.size();) {
    size_t len = 1;
    if (kind(i) == ir::OpKind::kRmsNorm && kind(i + 1) == ir::OpKind::kRmsNorm && kind(i + 2) == ir::OpKind::kRope) {
      len = 4;
    } else if (kind(i) == ir::OpKind::kRmsNorm && kind(i + 1) == ir::OpKind::kAdd) {
      len = kind(i + 2) == ir::OpKind::kRmsNorm ? 3 : 2;
    }
    for (size_t k = i; k < i + len; ++k) ends[k] = i + len - 1;
    i += len;
  }
  return ends;
}

// Pairs of tensors whose lifetimes (first write .. last read, reads counted to the end of
// the reader's launch) overlap and that share a byte.
int live_overlaps(const ir::Network& net, const std::vector<Dims>& dims, const MemoryPlan& plan,
                  const DeviceBackend& device) {
  const std::vector<size_t> ends = device.launch_group_ends(net);
  const size_t tensors = net.tensors.size();
  std::vector<size_t> born(tensors, 0), dies(tensors, 0);
  for (size_t n = 0; n < net.nodes.size(); ++n) {
    for (int32_t t : net.nodes[n].outputs) born[static_cast<size_t>(t)] = n, dies[static_cast<size_t>(t)] = ends[n];
  }
  for (size_t n = 0; n < net.nodes.size(); ++n) {
    for (int32_t t : net.nodes[n].inputs)
      dies[static_cast<size_t>(t)] = std::max(dies[static_cast<size_t>(t)], ends[n]);
  }
  int checked = 0, overlaps = 0;
  for (size_t a = 0; a < tensors; ++a) {
    for (size_t b = a + 1; b < tensors; ++b) {
      if (plan.tensor_offset[a] < 0 || plan.tensor_offset[b] < 0) continue;
      if (dies[a] < born[b] || dies[b] < born[a]) continue;  // never live at once
      const int64_t a0 = plan.tensor_offset[a], a1 = a0 + ir::tensor_bytes(dims[a], DataType::kF32);
      const int64_t b0 = plan.tensor_offset[b], b1 = b0 + ir::tensor_bytes(dims[b], DataType::kF32);
      overlaps += a1 <= b0 || b1 <= a0 ? 0 : 1;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  return overlaps;
}

TEST(MemoryPlan, LiveTensorsNeverShareBytesWithSingleAndFusedLaunches) {
  models::Gemma3Config config = models::gemma3_mini_config();
  config.max_context = 64;
  models::RandomWeights weights(1);
  Result<models::BuiltModel> model = models::build_gemma3(config, weights);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ir::Network& net = model->network;
  const Dims in{1, 48};
  std::vector<Dims> dims;
  ASSERT_TRUE(ir::infer_shapes(net, std::vector<Dims>{in, in}, dims).ok());
  const std::vector<uint32_t> tactics(net.nodes.size(), 0);

  const std::shared_ptr<const DeviceBackend> cpu = cpu_backend();
  const MemoryPlan single = plan_memory(net, dims, tactics, *cpu);
  EXPECT_EQ(live_overlaps(net, dims, single, *cpu), 0);

  const GroupedBackend grouped(cpu, chains(net));
  const std::vector<size_t> ends = grouped.launch_group_ends(net);
  ASSERT_GT(std::count_if(ends.begin(), ends.end(), [&, n = size_t{0}](size_t e) mutable { return e != n++; }), 10)
      << "the mini Gemma-3 has fusable chains";
  const MemoryPlan fused = plan_memory(net, dims, tactics, grouped);
  EXPECT_EQ(live_overlaps(net, dims, fused, grouped), 0);
  // The plan made for single launches puts a chain's outputs on bytes its inputs still
  // hold (what made fused kernels race): the check sees it.
  EXPECT_GT(live_overlaps(net, dims, single, grouped), 0);
}

}  // namespace
}  // namespace gearbox::internal
