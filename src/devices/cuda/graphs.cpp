#include "devices/cuda/graphs.h"

#include <algorithm>
#include <mutex>
#include <span>
#include <utility>

#include "core/log.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/capture_lock.h"
#include "devices/cuda/dispatch.h"

namespace gearbox::internal {

using ir::Network;
namespace {

/// A launch's key for ShapeGraphs: every tensor's, state's and the scratch's address, the
/// host outputs' progress slots, and every tensor's dims.
std::vector<int64_t> shape_key(const NetworkLaunch& launch, std::span<const cuda::OutputProgress> progress) {
  std::vector<int64_t> key;
  key.reserve(launch.tensors.size() * 4 + launch.states.size() + 1);
  const auto address = [](const void* p) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(p)); };
  for (void* t : launch.tensors) key.push_back(address(t));
  for (void* st : launch.states) key.push_back(address(st));
  key.push_back(address(launch.scratch));
  key.push_back(static_cast<int64_t>(progress.size()));
  for (const cuda::OutputProgress& p : progress) key.push_back(address(p.slots));
  for (const Dims& d : launch.dims) {
    key.push_back(d.rank());
    for (int32_t i = 0; i < d.rank(); ++i) key.push_back(d[i]);
  }
  return key;
}

}  // namespace

/// `net` captured as one graph on `stream` (the caller holds cuda_capture_mutex).
Result<cudaGraphExec_t> capture_graph(const Network& net, const CudaWeights& weights, const NetworkLaunch& launch,
                                      cudaStream_t stream, const std::vector<Step>& steps) {
  GEARBOX_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Status launched = run_all(net, weights, launch, stream, steps);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!launched.ok()) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    return launched;
  }
  GEARBOX_CUDA(ended);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  GEARBOX_CUDA(made);
  return exec;
}

Status launch_profile_graph(const ir::Network& net, const CudaWeights& weights, const NetworkLaunch& launch,
                            CapturedGraph& graph, const std::vector<Step>& steps, cudaStream_t stream) {
  const auto* state = static_cast<const CudaContextState*>(launch.context);
  CapturedGraph& g = graph;
  std::vector<void*> key = launch.tensors;
  key.insert(key.end(), launch.states.begin(), launch.states.end());
  key.push_back(launch.scratch);
  for (const cuda::OutputProgress& p : state->host_progress) key.push_back(p.slots);
  if (g.exec == nullptr || g.key != key) {
    if (g.exec != nullptr) GEARBOX_CUDA(cudaGraphExecDestroy(g.exec));
    g.exec = nullptr;
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    Result<cudaGraphExec_t> exec = capture_graph(net, weights, launch, stream, steps);
    if (!exec.ok()) return exec.status();
    g.exec = *exec;
    g.key = std::move(key);
    GEARBOX_LOG(kDebug, "cuda: profile %d captured its graph for new addresses", launch.profile);
  }
  return cuda_check(cudaGraphLaunch(g.exec, stream), "cudaGraphLaunch");
}

/// A call of a profile whose shapes vary (ShapeGraphs): the graph of its key, the key
/// captured now if met before, else the launches themselves.
Status launch_shape_graph(const Network& net, const CudaWeights& weights, const NetworkLaunch& launch,
                          ShapeGraphs& cache, const std::vector<Step>& steps, cudaStream_t stream) {
  std::vector<int64_t> key = shape_key(launch, static_cast<const CudaContextState*>(launch.context)->host_progress);
  ++cache.clock;
  for (ShapeGraphs::Entry& e : cache.graphs) {
    if (e.key == key) {
      e.used = cache.clock;
      return cuda_check(cudaGraphLaunch(e.exec, stream), "cudaGraphLaunch");
    }
  }
  const auto seen = std::find(cache.seen.begin(), cache.seen.end(), key);
  if (seen == cache.seen.end()) {
    if (cache.seen.size() == kShapeKeysSeen) cache.seen.erase(cache.seen.begin());
    cache.seen.push_back(std::move(key));
    return run_all(net, weights, launch, stream, steps);
  }
  cache.seen.erase(seen);
  cudaGraphExec_t exec = nullptr;
  {
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    Result<cudaGraphExec_t> captured = capture_graph(net, weights, launch, stream, steps);
    if (!captured.ok()) return captured.status();
    exec = *captured;
  }
  GEARBOX_LOG(kDebug, "cuda: profile %d captured a graph for a shape it met before", launch.profile);
  if (cache.graphs.size() == kShapeGraphs) {
    auto oldest =
        std::min_element(cache.graphs.begin(), cache.graphs.end(),
                         [](const ShapeGraphs::Entry& a, const ShapeGraphs::Entry& b) { return a.used < b.used; });
    GEARBOX_CUDA(cudaGraphExecDestroy(oldest->exec));
    cache.graphs.erase(oldest);
  }
  cache.graphs.push_back({std::move(key), exec, cache.clock});
  return cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
}

}  // namespace gearbox::internal
