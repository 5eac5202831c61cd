#include "runtime/memory_plan.h"

#include <algorithm>
#include <map>

#include "ir/shape_inference.h"

namespace gearbox::internal {
namespace {

int64_t align64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

MemoryPlan plan_memory(const ir::Network& net, std::span<const Dims> max_dims, std::span<const uint32_t> tactics,
                       const DeviceBackend& device) {
  const size_t tensors = net.tensors.size();
  MemoryPlan plan;
  plan.tensor_offset.assign(tensors, -1);

  std::vector<bool> bound(tensors, false);
  for (const ir::InputSpec& in : net.inputs) bound[static_cast<size_t>(in.tensor)] = true;
  for (int32_t out : net.outputs) bound[static_cast<size_t>(out)] = true;

  // Last node that reads each tensor (a tensor nobody reads dies right after its producer),
  // counted to the end of the launch the reader runs in (a fused chain reads all its
  // inputs while it writes its outputs).
  const std::vector<size_t> group_end = device.launch_group_ends(net);
  std::vector<size_t> last_use(tensors, 0);
  for (size_t n = 0; n < net.nodes.size(); ++n) {
    for (int32_t t : net.nodes[n].outputs) last_use[static_cast<size_t>(t)] = group_end[n];
    for (int32_t t : net.nodes[n].inputs) last_use[static_cast<size_t>(t)] = group_end[n];
  }

  // First-fit over the live blocks, ordered by offset.
  std::map<int64_t, std::pair<int64_t, int32_t>> live;  // offset -> (bytes, tensor)
  int64_t peak = 0;
  int64_t scratch = 0;
  for (size_t n = 0; n < net.nodes.size(); ++n) {
    const ir::Node& node = net.nodes[n];
    scratch = std::max(scratch, device.scratch_bytes(net, node, tactics[n], max_dims));
    for (int32_t t : node.outputs) {
      const auto ti = static_cast<size_t>(t);
      if (bound[ti]) continue;
      const int64_t bytes = align64(ir::tensor_bytes(max_dims[ti], device.storage_type(net.tensors[ti].dtype)));
      int64_t offset = 0;
      for (const auto& [start, block] : live) {
        if (start - offset >= bytes) break;
        offset = std::max(offset, start + block.first);
      }
      live.emplace(offset, std::make_pair(bytes, t));
      plan.tensor_offset[ti] = offset;
      peak = std::max(peak, offset + bytes);
    }
    // Free what this node was the last to touch (its own outputs stay until read).
    for (auto it = live.begin(); it != live.end();) {
      const auto ti = static_cast<size_t>(it->second.second);
      it = last_use[ti] <= n ? live.erase(it) : std::next(it);
    }
  }
  plan.scratch_offset = align64(peak);
  plan.arena_bytes = align64(plan.scratch_offset + scratch);
  return plan;
}

}  // namespace gearbox::internal
