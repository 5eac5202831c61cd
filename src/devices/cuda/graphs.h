// CUDA graphs of the network: one per static-shape profile (decode), captured once per
// context for the addresses it is called with and replayed; and, for a profile whose shapes
// vary, one per shape that comes back (ShapeGraphs).
//
//   Status s = launch.static_shapes ? launch_profile_graph(net, w, launch, state.graphs[p], steps, stream)
//                                   : launch_shape_graph(net, w, launch, state.shape_graphs[p], steps, stream);
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "devices/cuda/fusion_plan.h"
#include "gearbox/status.h"
#include "ir/network.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {

class CudaWeights;

struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  std::vector<void*> key;  // the addresses the graph was captured with
};

// A profile whose shapes vary (prefill) enqueues a few hundred launches per call, host time
// that bounds short calls. Its calls whose addresses and dims
// come back (a benchmark, a fixed chunk size, one token at a time on that profile) replay a
// graph instead: captured the second time a key is met (a key met once runs launch by
// launch, so one-off shapes pay no capture), at most kShapeGraphs kept per profile, the
// least recently used replaced. GEARBOX_CUDA_SHAPE_GRAPHS=0: every such call runs launch
// by launch.
inline constexpr size_t kShapeGraphs = 4;
inline constexpr size_t kShapeKeysSeen = 8;

struct ShapeGraphs {
  struct Entry {
    std::vector<int64_t> key;
    cudaGraphExec_t exec = nullptr;
    uint64_t used = 0;
  };
  std::vector<Entry> graphs;
  std::vector<std::vector<int64_t>> seen;  // keys met once, oldest first
  uint64_t clock = 0;
};

/// `net` captured as one graph on `stream` (the caller holds cuda_capture_mutex).
Result<cudaGraphExec_t> capture_graph(const ir::Network& net, const CudaWeights& weights, const NetworkLaunch& launch,
                                      cudaStream_t stream, const std::vector<Step>& steps);

/// A call of a static-shape profile: replays `graph`, captured again first when the call's
/// addresses differ from those it was captured with.
Status launch_profile_graph(const ir::Network& net, const CudaWeights& weights, const NetworkLaunch& launch,
                            CapturedGraph& graph, const std::vector<Step>& steps, cudaStream_t stream);

/// A call of a profile whose shapes vary (ShapeGraphs): the graph of its key, the key
/// captured now if met before, else the launches themselves.
Status launch_shape_graph(const ir::Network& net, const CudaWeights& weights, const NetworkLaunch& launch,
                          ShapeGraphs& cache, const std::vector<Step>& steps, cudaStream_t stream);

}  // namespace gearbox::internal
