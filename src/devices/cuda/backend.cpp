// The CUDA device: weights uploaded once in their checkpoint dtype, f32 activations, our
// kernels (devices/cuda/kernels/) and cuBLASLt, work ordered on cudaStream_t, and a CUDA
// graph per static-shape profile (decode) captured once per context and replayed (and, for
// a profile whose shapes vary, per shape that comes back: ShapeGraphs).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "core/settings.h"
#include "devices/cpu/kernels.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/capture_lock.h"
#include "devices/cuda/cublaslt_library.h"
#include "devices/cuda/dispatch.h"
#include "devices/cuda/gemm_cublaslt.h"
#include "devices/cuda/graphs.h"
#include "devices/cuda/host_outputs.h"
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/kernels/prefill_attention.cuh"
#include "devices/cuda/kernels/prefill_attention_mma.cuh"
#include "devices/cuda/linear_tactics.h"
#include "devices/cuda/tuning.h"
#include "devices/cuda/weight_upload.h"
#include "ir/shape_inference.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {

using ir::Network;
using ir::Node;
using ir::OpKind;

Status cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return {};
  return device_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

namespace {

// Raised when a kernel change can change which tactic is fastest, so that tactics timed
// against older kernels are tuned again at load (COMPATIBILITY.md). 2: programmatic
// dependent launch, the gated GEMV, the split prefill attention. 3: the tensor-core prefill
// attention, and tactics ranked by device time (time_node). 4: the split prefill
// attentions' row-wise combine (both prefill tactics' times change). 5: the tensor-core
// prefill attention copies bf16 tiles asynchronously (its time changes). 6: GEMV geometries
// (tactics kLinearGemvGeometry + i). 7: one GEMM over a multi-output linear's stacked weights
// (tactics kLinearStacked + i), and the tensor-core prefill writes the new cache rows itself.
// 8: a gated MLP's gate / up GEMMs write their outputs in the weights' 16-bit type
// (rounded_gate_up: other cuBLASLt algorithms, the stacked tactic without split_columns).
// 9: cuBLASLt linears hold a heuristic per bucket of row counts (linear_tactics.h), the
// q / k norm + RoPE of several tokens runs a warp per head, and a gated MLP's gate / up
// linear is timed with its activation (fused into the GEMV, a launch after the GEMM).
// 10: GEMV launches run at most the resident blocks, each serving several blocks' worth of
// rows (every geometry's time changes), and the decode attention loads its first keys early.
// 11: a linear whose output a caller may take in host memory (the logits) is timed as the
// output gets there: a GEMV storing into page-locked memory, other tactics with the copy.
// 12: a GEMV chunk in fewer instructions, and 3 blocks an SM for geometries whose threads
// hold 8 chunks (every geometry's time changes, r2u4's and r4u2's by up to a third).
// 13: the tensor-core GEMV for linears of 2 to 16 rows (tactic kLinearGemvMma).
constexpr int kKernelsVersion = 13;

/// True when every linear of `net` has bf16 weights: a network whose products already take
/// bf16 operands, where bf16 attention products lose nothing a user chose to keep (f16 keeps
/// 3 more mantissa bits, f32 13).
bool bf16_linears(const Network& net) {
  bool any = false;
  for (const Node& node : net.nodes) {
    if (node.kind != OpKind::kLinear || node.weights.empty()) continue;
    const DataType type = net.weights[static_cast<size_t>(node.weights[0])].dtype;  // the matrix (not the bias)
    if (type != DataType::kBF16) return false;
    any = true;
  }
  return any;
}

/// Whether kernels go out with programmatic dependent launch (launch.h): where the sm_90 code
/// runs, unless GEARBOX_CUDA_PDL=0 (for measuring what overlapping launches buys).
bool dependent_launch_enabled() {
  static const bool enabled = settings().cuda_pdl && backend_limits().hopper_code_runs;
  return enabled;
}

// ---- streams ---------------------------------------------------------------------------------------

class CudaStream final : public StreamImpl {
 public:
  explicit CudaStream(cudaStream_t stream) : stream_(stream) {}
  ~CudaStream() override {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  DeviceKind kind() const noexcept override { return DeviceKind::kCuda; }
  cudaStream_t get() const { return stream_; }

  Status enqueue(std::function<Status()> task) override {
    auto* heap = new std::function<Status()>(std::move(task));
    const cudaError_t err = cudaLaunchHostFunc(
        stream_,
        [](void* p) {
          std::unique_ptr<std::function<Status()>> t(static_cast<std::function<Status()>*>(p));
          const Status s = (*t)();
          if (!s.ok()) GEARBOX_LOG(kError, "host work on a CUDA stream failed: %s", s.to_string().c_str());
        },
        heap);
    if (err != cudaSuccess) delete heap;
    return cuda_check(err, "cudaLaunchHostFunc");
  }

  Status record(Event& event) override {
    auto cuda = std::dynamic_pointer_cast<CudaEvent>(event.impl());
    if (!cuda) {
      cuda = std::make_shared<CudaEvent>();
      if (cuda->get() == nullptr) return device_error("cudaEventCreateWithFlags failed");
      event.impl() = cuda;
    }
    return cuda_check(cudaEventRecord(cuda->get(), stream_), "cudaEventRecord");
  }

  Status synchronize() override { return cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_;
};

cudaStream_t native(StreamImpl& s) { return static_cast<CudaStream&>(s).get(); }

// ---- weights ---------------------------------------------------------------------------------------

/// Uploads one inverse-frequency table per distinct (theta, head_dim) of the network's RoPE
/// nodes without a table of their own, so that the rotations use the CPU's values and no
/// kernel computes a pow. Each table starts on 16 bytes (head_norm_rope's warp form takes a
/// table only where it is 16-byte aligned; weights start on 64).
Status upload_rope_tables(const Network& net, CudaWeights* w) {
  std::map<std::pair<float, int64_t>, size_t> offsets;  // in floats
  std::vector<float> host;
  for (const Node& node : net.nodes) {
    const std::pair<float, int64_t> key{node.attrs.theta, node.attrs.head_dim};
    if (node.kind != OpKind::kRope || !node.weights.empty() || node.attrs.head_dim <= 0 || offsets.contains(key)) {
      continue;
    }
    host.resize((host.size() + 3) / 4 * 4, 0.0f);
    offsets.emplace(key, host.size());
    for (int64_t i = 0; i < node.attrs.head_dim / 2; ++i) {
      host.push_back(cpu::rope_inv_freq(node.attrs.theta, i, node.attrs.head_dim));
    }
  }
  if (host.empty()) return {};
  GEARBOX_CUDA(cudaMalloc(&w->rope_base, host.size() * sizeof(float)));
  GEARBOX_CUDA(cudaMemcpy(w->rope_base, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  for (const auto& [key, offset] : offsets)
    w->rope_tables.emplace(key, static_cast<const float*>(w->rope_base) + offset);
  return {};
}

void cuda_free(void* p) {
  const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
  (void)cudaFree(p);
}

void cuda_free_host(void* p) {
  const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
  (void)cudaFreeHost(p);
}

/// The network output that linear node n writes and no node reads (nor is it an input): an
/// output a caller may take in host memory. -1 for none.
int32_t host_bound_output(const Network& net, size_t n) {
  const Node& node = net.nodes[n];
  if (node.kind != OpKind::kLinear || node.outputs.size() != 1) return -1;
  const int32_t t = node.outputs[0];
  if (std::find(net.outputs.begin(), net.outputs.end(), t) == net.outputs.end() || network_input(net, t)) return -1;
  for (const Node& other : net.nodes) {
    if (std::find(other.inputs.begin(), other.inputs.end(), t) != other.inputs.end()) return -1;
  }
  return t;
}

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(cudaDeviceProp prop) : prop_(prop) {}

  DeviceKind kind() const noexcept override { return DeviceKind::kCuda; }
  std::string device_name() const override { return prop_.name; }
  std::string library_versions() const override {
    int runtime = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    return "cuda " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + ", sm_" +
           std::to_string(prop_.major * 10 + prop_.minor) + ", " + cuda::CublasLtGemm::version() + ", kernels " +
           std::to_string(kKernelsVersion);
  }
  DataType storage_type(DataType declared) const noexcept override { return cuda_storage_type(declared); }

  std::vector<TacticInfo> tactics(const Node& node) const override {
    switch (node.kind) {
      case OpKind::kLinear: {
        std::vector<TacticInfo> linear = {{kLinearCublasLt, "cublaslt"},
                                          {kLinearGemv, "gemv"},
                                          {kLinearGemvMma, "gemv_mma"},
                                          {kLinearCublasLtAlt + 1, "cublaslt_h1"},
                                          {kLinearCublasLtAlt + 2, "cublaslt_h2"},
                                          {kLinearCublasLtAlt + 3, "cublaslt_h3"},
                                          {kLinearStacked, "cublaslt_stacked"},
                                          {kLinearStacked + 1, "cublaslt_stacked_h1"},
                                          {kLinearStacked + 2, "cublaslt_stacked_h2"},
                                          {kLinearStacked + 3, "cublaslt_stacked_h3"}};
        // gemv_r<rows>u<unroll> for kGemvGeometries[1..] (entry 0 is the default, "gemv").
        static const std::vector<std::string> names = [] {
          std::vector<std::string> all;
          for (const cuda::GemvGeometry& g : cuda::kGemvGeometries) {
            all.push_back("gemv_r" + std::to_string(g.rows) + "u" + std::to_string(g.unroll));
          }
          return all;
        }();
        for (uint32_t i = 1; i < kGemvGeometryCount; ++i) linear.push_back({kLinearGemvGeometry + i, names[i].c_str()});
        return linear;
      }
      case OpKind::kAttention:
        return {{kAttentionTiled, "tiled"}, {kAttentionSplitKv, "split_kv"}, {kAttentionMma, "mma_bf16"}};
      default: return {{kDefault, "default"}};
    }
  }

  std::string tactic_name(const Node& node, uint32_t tactic) const override {
    if (node.kind == OpKind::kLinear && lt::is_by_rows(tactic)) return lt::by_rows_name(tactic);
    return DeviceBackend::tactic_name(node, tactic);
  }

  Result<uint32_t> refine_tactic(const Network& net, const DeviceWeights& weights, size_t node, uint32_t tactic,
                                 std::span<const Dims> min_dims, std::span<const Dims> max_dims,
                                 TuningMemo& memo) const override {
    return refine_by_rows(net, static_cast<const CudaWeights&>(weights), node, tactic, min_dims, max_dims, memo);
  }

  bool tactic_runnable(const Network& net, const Node& node, uint32_t tactic,
                       std::span<const Dims> max_dims) const override {
    // Stacked linears run with fusion off too; only the tuner leaves them out then.
    if (node.kind == OpKind::kLinear && is_stacked(tactic)) return stackable(net, node);
    return tactic_valid(net, node, tactic, max_dims);
  }

  bool tactic_valid(const Network& net, const Node& node, uint32_t tactic,
                    std::span<const Dims> max_dims) const override {
    switch (node.kind) {
      case OpKind::kLinear: {
        const Dims& x = max_dims[static_cast<size_t>(node.inputs[0])];
        const bool gemv_k = x.rank() > 0 && x[x.rank() - 1] <= cuda::kGemvMaxK;  // the GEMV's longest row
        if (tactic == kLinearGemvMma) {
          // Every weight bf16 (a bias stays f32), rows of whole 16-byte chunks, and a profile
          // of several rows: one row is the SIMT GEMV's, which also takes the norms before it
          // and the q / k norms after it into its launches (dispatch_steps.cpp), which timing
          // the linear alone does not see.
          const int64_t rows = ir::row_count(x), k = x[x.rank() - 1];
          const size_t weights = node.attrs.has_bias != 0 ? node.outputs.size() : node.weights.size();
          for (size_t i = 0; i < weights; ++i) {
            if (net.weights[static_cast<size_t>(node.weights[i])].dtype != DataType::kBF16) return false;
          }
          return rows >= 2 && cuda::gemv_mma_served(rows, k);
        }
        if (tactic == kLinearGemv) return gemv_k && ir::row_count(x) <= cuda::kGemvMaxRows;
        if (is_gemv(tactic)) return gemv_k && ir::row_count(x) == 1;
        if (is_stacked(tactic)) return fusion_enabled() && stackable(net, node);
        return lt::is_per_output(tactic);
      }
      case OpKind::kAttention:
        if (node.attrs.head_dim > cuda::kAttentionMaxHeadDim) return false;
        // The tensor-core attention serves one sequence; a batched network's slots take the
        // split-KV and tiled kernels (kv_cache.cuh's CacheSlots).
        if (tactic == kAttentionMma) return bf16_linears(net) && net.slots == 0;
        return tactic == kAttentionSplitKv || tactic == kAttentionTiled;
      default: return tactic == kDefault;
    }
  }

  int64_t scratch_bytes(const Network& net, const Node& node, uint32_t tactic,
                        std::span<const Dims> dims) const override {
    if (node.kind != OpKind::kLinear && node.kind != OpKind::kAttention) return 0;  // kConstant has no input
    const Dims& x = dims[static_cast<size_t>(node.inputs[0])];
    if (node.kind == OpKind::kLinear && !is_gemv(tactic)) {
      const DataType type = net.weights[static_cast<size_t>(node.weights[0])].dtype;
      const int64_t m = ir::row_count(x), k = x[x.rank() - 1];
      if (is_stacked(tactic)) {
        // A rounded gate / up GEMM writes into its output tensor, not the scratch.
        if (node.outputs.size() == 2 && rounded_gate_up_node(net, plan_steps(net, fusion_enabled()),
                                                             static_cast<size_t>(&node - net.nodes.data()), tactic)) {
          return cuda::CublasLtGemm::scratch_bytes(m, k, type);
        }
        int64_t total = 0;
        for (size_t o = 0; o < node.outputs.size(); ++o) {
          total += net.weights[static_cast<size_t>(node.weights[o])].dims[0];
        }
        return stacked_output_offset(m, k, type) + m * total * 4;
      }
      return cuda::CublasLtGemm::scratch_bytes(m, k, type);
    }
    if (node.kind == OpKind::kAttention) {
      const int64_t t = x[0] * x[1];
      if (tactic == kAttentionSplitKv) {
        return cuda::attention_decode_partials_floats(t, node.attrs.heads, node.attrs.head_dim, kMaxSplits) * 4;
      }
      if (tactic == kAttentionMma) {
        return cuda::attention_prefill_mma_scratch_floats(t, node.attrs.heads, node.attrs.kv_heads, node.attrs.head_dim,
                                                          net.max_context, backend_limits()) *
               4;
      }
      return cuda::attention_prefill_scratch_floats(t, node.attrs.heads, node.attrs.head_dim, backend_limits()) * 4;
    }
    return 0;
  }

  Result<std::shared_ptr<DeviceWeights>> upload_weights(const Network& net,
                                                        std::span<const uint8_t> payload) const override {
    auto w = std::make_shared<CudaWeights>();
    w->size = static_cast<int64_t>(payload.size());
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    const cudaError_t err = cudaMalloc(&w->base, std::max<size_t>(payload.size(), 1));
    if (err == cudaErrorMemoryAllocation) {
      return resource_exhausted("not enough GPU memory for " + std::to_string(payload.size()) + " bytes of weights");
    }
    GEARBOX_CUDA(err);
    GEARBOX_RETURN_IF_ERROR(upload_to_device(w->base, payload));
    for (const ir::WeightInfo& info : net.weights) {
      w->ptr.push_back(static_cast<const uint8_t*>(w->base) + info.offset);
      w->type.push_back(info.dtype);
    }
    GEARBOX_RETURN_IF_ERROR(upload_rope_tables(net, w.get()));
    w->steps = plan_steps(net, fusion_enabled());
    return std::shared_ptr<DeviceWeights>(std::move(w));
  }

  Result<DeviceBuffer> allocate(int64_t bytes) const override {
    void* p = nullptr;
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return resource_exhausted("not enough GPU memory for " + std::to_string(bytes) + " bytes");
    }
    GEARBOX_CUDA(err);
    return DeviceBuffer(p, &cuda_free);
  }

  Result<DeviceBuffer> allocate_pinned(int64_t bytes) const override {
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    return allocate_pinned_locked(bytes);
  }

  /// allocate_pinned, the caller holding cuda_capture_mutex.
  static Result<DeviceBuffer> allocate_pinned_locked(int64_t bytes) {
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)), cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return resource_exhausted("not enough page-locked host memory for " + std::to_string(bytes) + " bytes");
    }
    GEARBOX_CUDA(err);
    return DeviceBuffer(p, &cuda_free_host);
  }

  Result<std::unique_ptr<HostOutputs>> create_host_outputs(const HostOutputsSpec& spec) const override {
    if (spec.context == nullptr) return DeviceBackend::create_host_outputs(spec);
    cuda::HostOutputRoutes routes;
    for (const std::span<const uint32_t> tactics : spec.tactics) {
      std::vector<bool>& profile = routes.writes_to_host.emplace_back();
      for (size_t o = 0; o < spec.max_bytes.size(); ++o)
        profile.push_back(cuda::writes_output_to_host(*spec.net, tactics, o));
    }
    routes.memory_kind = cuda::host_memory_kind;
    routes.progress = &static_cast<CudaContextState*>(spec.context)->host_progress;
    return cuda::make_host_outputs(*this, spec, std::move(routes));
  }

  /// The smallest, opt and largest extent, and every row bucket's top between them: a GEMM
  /// takes its algorithms from its bucket's top or the top just below it
  /// (linear_tactics::list_rows), which lies between these extents or is the smallest one's,
  /// so these calls choose and load every kernel the profile's calls run.
  std::vector<int64_t> warm_up_extents(int64_t min, int64_t opt, int64_t max) const override {
    std::vector<int64_t> extents = {min, opt, max};
    for (int b = 0; b < cuda::linear_tactics::kRowBuckets; ++b) {
      const int64_t top = cuda::linear_tactics::bucket_top(b);
      if (top > min && top < max) extents.push_back(top);
    }
    std::sort(extents.begin(), extents.end());
    extents.erase(std::unique(extents.begin(), extents.end()), extents.end());
    return extents;
  }

  Result<std::unique_ptr<DeviceContextState>> create_context_state(int32_t profiles) const override {
    auto state = std::make_unique<CudaContextState>();
    {
      const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
      GEARBOX_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&state->fault_host), sizeof(int), cudaHostAllocMapped));
      *state->fault_host = 0;
      GEARBOX_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&state->fault_device), state->fault_host, 0));
    }
    Result<std::unique_ptr<cuda::CublasLtGemm>> gemm = cuda::CublasLtGemm::create();
    if (!gemm.ok()) return gemm.status();
    state->gemm = std::move(*gemm);
    state->graphs.resize(static_cast<size_t>(profiles));
    state->shape_graphs.resize(static_cast<size_t>(profiles));
    return std::unique_ptr<DeviceContextState>(std::move(state));
  }

  Status take_input_fault(DeviceContextState* context) const override {
    auto* state = static_cast<CudaContextState*>(context);
    if (state == nullptr || state->fault_host == nullptr) return {};
    volatile int* flag = state->fault_host;
    const int fault = *flag;
    if (fault == 0) return {};
    *flag = 0;
    return out_of_range(
        "a kernel met a value outside its range in a device-resident input (a token id outside "
        "the vocabulary, a position outside the KV cache, or an index_select / gather index outside "
        "its axis); that run's outputs are not valid");
  }

  Result<std::shared_ptr<StreamImpl>> create_stream() const override {
    cudaStream_t s = nullptr;
    GEARBOX_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return std::shared_ptr<StreamImpl>(std::make_shared<CudaStream>(s));
  }

  Status copy_from_host(void* dst, const void* src, int64_t bytes, StreamImpl& stream) const override {
    // From pageable memory this returns once the source has been read.
    return cuda_check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, native(stream)),
                      "cudaMemcpyAsync (input)");
  }

  Status enqueue_copy(void* dst, const void* src, int64_t bytes, StreamImpl& stream) const override {
    return cuda_check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, native(stream)),
                      "cudaMemcpyAsync");
  }

  std::vector<size_t> launch_group_ends(const Network& net) const override {
    std::vector<size_t> ends(net.nodes.size());
    const std::vector<Step> steps = plan_steps(net, fusion_enabled());
    for (size_t i = 0; i < steps.size(); ++i) {
      // A step whose last norm only the next step's linear reads may run inside that linear's
      // GEMV (norm_into_gemv), and q / k norms and RoPE only an attention reads inside that
      // attention (head_norm_into_attention), decided per launch: the step's tensors then live
      // through the next step.
      const bool into_next = (steps[i].feeds_linear || steps[i].feeds_attention) && i + 1 < steps.size();
      for (size_t n : steps[i].nodes) ends[n] = (into_next ? steps[i + 1] : steps[i]).nodes.back();
    }
    return ends;
  }

  Status enqueue_network(const Network& net, const DeviceWeights& weights, NetworkLaunch launch,
                         StreamImpl& stream) const override {
    const auto& w = static_cast<const CudaWeights&>(weights);
    const cudaStream_t s = native(stream);
    auto* state = static_cast<CudaContextState*>(launch.context);
    if (state == nullptr) return run_all(net, w, launch, s, w.steps);
    const auto profile = static_cast<size_t>(launch.profile);
    if (launch.static_shapes) return launch_profile_graph(net, w, launch, state->graphs[profile], w.steps, s);
    // A warm-up call is no shape met: it must not make a request's call of its shape capture.
    if (!settings().cuda_shape_graphs || launch.warm_up) return run_all(net, w, launch, s, w.steps);
    return launch_shape_graph(net, w, launch, state->shape_graphs[profile], w.steps, s);
  }

  Status run_node(const Network& net, const DeviceWeights& weights, size_t node, uint32_t tactic,
                  const NodeArgs& args) const override {
    // Synchronous: the builder times it with a host clock.
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    GEARBOX_RETURN_IF_ERROR(
        internal::run_node(net, static_cast<const CudaWeights&>(weights), node, tactic, args, launch_on(nullptr)));
    return cuda_check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }

  /// Device time between two events around the node's launches. A spin kernel ahead of them
  /// keeps the GPU busy while the host enqueues them, so the interval holds the node's
  /// kernels and the gaps between them (as in a captured graph), not the host's launch cost
  /// (which can be twice a small GEMV's time and can rank two close attention kernels either
  /// way).
  Result<double> time_node(const Network& net, const DeviceWeights& weights, size_t node, uint32_t tactic,
                           const NodeArgs& args) const override {
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    const CudaEvent start(cudaEventDefault), stop(cudaEventDefault);
    if (start.get() == nullptr || stop.get() == nullptr) return device_error("cudaEventCreateWithFlags failed");
    // A gate / up linear is timed as it runs: with its activation (fused into the GEMV, or a
    // launch after the GEMM), its outputs rounded to 16 bits where rounded_gate_up holds.
    const auto& w = static_cast<const CudaWeights&>(weights);
    Result<GatedTiming> gated = GatedTiming::for_node(net, w.steps, node, args);
    if (!gated.ok()) return gated.status();
    // A linear whose output a caller may take in host memory (the logits) is timed as that
    // output gets there: a GEMV storing it into page-locked memory itself (as the session
    // binds it: writes_output_to_host), any other tactic with the copy after it. Alone, a
    // GEMM may win and then lose more than that to the copy, and some GEMV geometries store to
    // the host far slower than others.
    const int32_t to_host = host_bound_output(net, node);
    NodeArgs run_args = args;
    std::vector<void*> tensors;
    int64_t host_bytes = 0;
    if (to_host >= 0) {
      const auto t = static_cast<size_t>(to_host);
      host_bytes = args.dims[t].volume() * static_cast<int64_t>(data_type_size(storage_type(net.tensors[t].dtype)));
      if (timing_host_bytes_ < host_bytes) {
        if (void* old = timing_host_.release(); old != nullptr) (void)cudaFreeHost(old);  // the lock is held
        timing_host_bytes_ = 0;
        Result<DeviceBuffer> host = allocate_pinned_locked(host_bytes);
        if (!host.ok()) return host.status();
        timing_host_ = std::move(*host);
        timing_host_bytes_ = host_bytes;
      }
      if (is_simt_gemv(tactic)) {
        tensors.assign(args.tensors.begin(), args.tensors.end());
        tensors[t] = timing_host_.get();
        run_args.tensors = tensors;
      }
    }
    GEARBOX_CUDA(cuda::spin(kTimingSpinMicros, launch_on(nullptr)));
    GEARBOX_CUDA(cudaEventRecord(start.get(), nullptr));
    const auto enqueue_start = std::chrono::steady_clock::now();
    Status s = gated->applies() ? gated->run(net, w, tactic, run_args)
                                : internal::run_node(net, w, node, tactic, run_args, launch_on(nullptr));
    if (s.ok() && to_host >= 0 && !is_simt_gemv(tactic)) {
      s = cuda_check(cudaMemcpyAsync(timing_host_.get(), args.tensors[static_cast<size_t>(to_host)],
                                     static_cast<size_t>(host_bytes), cudaMemcpyDeviceToHost, nullptr),
                     "cudaMemcpyAsync (timing a host output)");
    }
    const double enqueue_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - enqueue_start).count();
    GEARBOX_CUDA(cudaEventRecord(stop.get(), nullptr));
    GEARBOX_CUDA(cudaEventSynchronize(stop.get()));
    GEARBOX_RETURN_IF_ERROR(s);
    float ms = 0.0f;
    GEARBOX_CUDA(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    // Enqueueing took longer than the spin (a first call's host-side setup): the GPU waited
    // for the host inside the interval, which then measures the host as the old clock did.
    if (enqueue_us > kTimingSpinMicros) return std::max(static_cast<double>(ms) * 1000.0, enqueue_us);
    return static_cast<double>(ms) * 1000.0;
  }

 private:
  cudaDeviceProp prop_;
  // time_node's page-locked stand-in for a host output (under cuda_capture_mutex).
  mutable DeviceBuffer timing_host_{nullptr, &cuda_free_host};
  mutable int64_t timing_host_bytes_ = 0;
};

}  // namespace

cuda::Launch launch_on(cudaStream_t stream, bool first_plain) {
  const bool pdl = stream != nullptr && dependent_launch_enabled();
  return {stream, pdl, pdl && !first_plain, &backend_limits()};
}

std::mutex& cuda_capture_mutex() {
  static std::mutex* mutex = new std::mutex();  // never destroyed: frees may run at exit
  return *mutex;
}

void finish_device_background_work() { cuda::finish_cublaslt_loading(); }

Result<std::shared_ptr<const DeviceBackend>> cuda_backend() {
  static const Result<std::shared_ptr<const DeviceBackend>> backend =
      []() -> Result<std::shared_ptr<const DeviceBackend>> {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      return not_found("no CUDA device is available (no GPU or no driver); use --device cpu");
    }
    // cuBLASLt loads beside the context's creation, which cudaSetDevice begins, and then
    // does its first-use work beside the engine's load.
    cuda::start_loading_cublaslt(&cuda::CublasLtGemm::prime);
    GEARBOX_CUDA(cudaSetDevice(0));
    cudaDeviceProp prop{};
    GEARBOX_CUDA(cudaGetDeviceProperties(&prop, 0));
    return std::shared_ptr<const DeviceBackend>(std::make_shared<const CudaBackend>(prop));
  }();
  return backend;
}

}  // namespace gearbox::internal

namespace gearbox::cuda {

HostMemoryKind host_memory_kind(const void* p, int64_t bytes) {
  const auto kind = [](const void* at) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, at) != cudaSuccess) {
      (void)cudaGetLastError();
      return HostMemoryKind::kPageable;
    }
    if (attr.type != cudaMemoryTypeHost) return HostMemoryKind::kPageable;
    // cudaHostAlloc memory is mapped at the host's own addresses (unified addressing), which
    // is how the kernels must reach it.
    return attr.devicePointer == at ? HostMemoryKind::kMapped : HostMemoryKind::kPageLocked;
  };
  if (bytes <= 0) return HostMemoryKind::kPageable;
  const HostMemoryKind first = kind(p);
  return first == HostMemoryKind::kPageable ? first : std::min(first, kind(static_cast<const char*>(p) + bytes - 1));
}

bool writes_output_to_host(const ir::Network& net, std::span<const uint32_t> tactics, size_t output) {
  // Over the host link a GEMV's stores ride under its weight stream, where a copy after the
  // network adds its whole transfer to the call.
  if (output >= net.outputs.size()) return false;
  const int32_t t = net.outputs[output];
  for (size_t n = 0; n < net.nodes.size() && n < tactics.size(); ++n) {
    if (internal::host_bound_output(net, n) == t) return internal::is_simt_gemv(tactics[n]);
  }
  return false;
}

}  // namespace gearbox::cuda
