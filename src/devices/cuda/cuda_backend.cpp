// The CUDA device: weights uploaded once in their checkpoint dtype, f32 activations, our
// kernels (devices/cuda/kernels/) and cuBLASLt, work ordered on cudaStream_t, and a CUDA
// graph per static-shape profile (decode) captured once per context and replayed (and, for
// a profile whose shapes vary, per shape that comes back: ShapeGraphs).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "devices/cpu/kernels.h"
#include "devices/cuda/capture_lock.h"
#include "devices/cuda/gemm_cublaslt.h"
#include "devices/cuda/host_outputs.h"
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/kernels/embedding.cuh"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/kernels/norm_rope.cuh"
#include "devices/cuda/kernels/prefill_attention.cuh"
#include "devices/cuda/kernels/prefill_attention_mma.cuh"
#include "devices/cuda/kernels/residual_norm.cuh"
#include "devices/cuda/linear_tactics.h"
#include "devices/cuda/switches.h"
#include "ir/shape_inference.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {
namespace {

using ir::Network;
using ir::Node;
using ir::OpKind;

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
constexpr int kKernelsVersion = 12;

// Tactic ids (stored in engine files); the cuBLASLt ones and their row-bucketed form are in
// linear_tactics.h.
namespace lt = cuda::linear_tactics;
constexpr uint32_t kDefault = 0;
constexpr uint32_t kLinearGemv = 1;
constexpr uint32_t kLinearCublasLt = lt::kCublasLt;        // cuBLASLt's first heuristic for the call's shape
constexpr uint32_t kLinearCublasLtAlt = lt::kCublasLtAlt;  // + i: its i-th heuristic (i in [1, kAltAlgos])
constexpr int kAltAlgos = lt::kAltAlgos;
constexpr uint32_t kLinearGemvGeometry = 10;  // + i: gemv with cuda::kGemvGeometries[i], i >= 1 (M = 1 only)
constexpr uint32_t kGemvGeometryCount = std::size(cuda::kGemvGeometries);
// + i: one GEMM (cuBLASLt's i-th heuristic, i in [0, kAltAlgos]) over the stacked weights of
// a multi-output linear (ir::linear_weights_stacked: fused QKV, gate+up) into the scratch,
// then split_columns writes each output (+ bias); 16-bit weights only. A gated MLP's gate / up
// linear (rounded_gate_up) writes the stacked output rounded to 16 bits and is not split.
constexpr uint32_t kLinearStacked = lt::kStacked;
constexpr uint32_t kAttentionSplitKv = 1;
constexpr uint32_t kAttentionTiled = 2;
constexpr uint32_t kAttentionMma = 3;  // bf16 tensor cores: bf16 networks only

/// Whether a linear's tactic is one of the GEMV kernels (kLinearGemv: the default geometry).
bool is_gemv(uint32_t tactic) {
  return tactic == kLinearGemv || (tactic > kLinearGemvGeometry && tactic < kLinearGemvGeometry + kGemvGeometryCount);
}
bool is_stacked(uint32_t tactic) { return lt::is_stacked(tactic); }
cuda::GemvGeometry gemv_geometry(uint32_t tactic) {
  return tactic == kLinearGemv ? cuda::kGemvDefaultGeometry : cuda::kGemvGeometries[tactic - kLinearGemvGeometry];
}
// Decode attention splits: up to 16 combine inside a thread-block cluster (sliding-window
// layers; one launch, kernels/decode_attention.cuh), more (long global contexts) in a second kernel.
constexpr int kMaxSplits = 32;

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

Status cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return {};
  return device_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}
#define GEARBOX_CUDA(call) GEARBOX_RETURN_IF_ERROR(cuda_check((call), #call))

/// The limits of the device the backend runs on (device 0, made current by cuda_backend()).
const cuda::DeviceLimits& backend_limits() { return cuda::device_limits(0); }

/// Whether kernels go out with programmatic dependent launch (launch.h): where the sm_90 code
/// runs, unless GEARBOX_CUDA_PDL=0 (for measuring what overlapping launches buys).
bool dependent_launch_enabled() {
  static const bool enabled = cuda::switch_on("GEARBOX_CUDA_PDL") && backend_limits().hopper_code_runs;
  return enabled;
}

/// How the backend's kernels go out on `stream`: with programmatic dependent launch where it is
/// enabled and the stream is not the legacy default stream (the builder's synchronous timing).
/// first_plain: the call's first kernel goes out plainly (a network's first kernel waits for
/// the inputs enqueued ahead of the network).
cuda::Launch launch_on(cudaStream_t stream, bool first_plain = false) {
  const bool pdl = stream != nullptr && dependent_launch_enabled();
  return {stream, pdl, pdl && !first_plain, &backend_limits()};
}

// ---- streams and events ----------------------------------------------------------------------

class CudaEvent final : public EventImpl {
 public:
  /// get() is null when creation failed. cudaEventDefault makes an event that times.
  explicit CudaEvent(unsigned flags = cudaEventDisableTiming) { (void)cudaEventCreateWithFlags(&event_, flags); }
  ~CudaEvent() override {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  Status synchronize() override { return cuda_check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  bool query() override { return cudaEventQuery(event_) != cudaErrorNotReady; }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

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

// ---- weights and per-context state ----------------------------------------------------------------

class CudaWeights final : public DeviceWeights {
 public:
  ~CudaWeights() override {
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    if (base != nullptr) (void)cudaFree(base);
    if (rope_base != nullptr) (void)cudaFree(rope_base);
  }
  int64_t bytes() const noexcept override { return size; }
  /// A RoPE node's inverse frequencies (head_dim / 2 floats): its weight when it has one,
  /// else the table for its (theta, head_dim) (cpu::rope_inv_freq's values), or null.
  const float* rope_table(const Node& rope) const {
    if (!rope.weights.empty()) return static_cast<const float*>(ptr[static_cast<size_t>(rope.weights[0])]);
    const auto it = rope_tables.find({rope.attrs.theta, rope.attrs.head_dim});
    return it == rope_tables.end() ? nullptr : it->second;
  }
  void* base = nullptr;
  int64_t size = 0;
  std::vector<const void*> ptr;  // per weight id
  std::vector<DataType> type;
  void* rope_base = nullptr;
  std::map<std::pair<float, int64_t>, const float*> rope_tables;
};

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

struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  std::vector<void*> key;  // the addresses the graph was captured with
};

// A profile whose shapes vary (prefill) enqueues a few hundred launches per call, 2-3 ms of
// host time on the 1B shape, which bounds short calls. Its calls whose addresses and dims
// come back (a benchmark, a fixed chunk size, one token at a time on that profile) replay a
// graph instead: captured the second time a key is met (a key met once runs launch by
// launch, so one-off shapes pay no capture), at most kShapeGraphs kept per profile, the
// least recently used replaced. GEARBOX_CUDA_SHAPE_GRAPHS=0: every such call launch by
// launch (as before).
constexpr size_t kShapeGraphs = 4;
constexpr size_t kShapeKeysSeen = 8;

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

bool shape_graphs_enabled() {
  static const bool on = cuda::switch_on("GEARBOX_CUDA_SHAPE_GRAPHS");
  return on;
}

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

// One launch of the network: a single node, or a fused chain of nodes (see plan_steps).
struct Step {
  enum Kind { kSingle, kHeadNormRope, kNormAddNorm, kGatedLinear } kind = kSingle;
  std::vector<size_t> nodes;
  // kNormAddNorm of three nodes (post-norm, add, pre-norm): its last norm is read only by the
  // next step's first node, a linear. Set on no other step.
  bool feeds_linear = false;
  // kSingle, a linear of three outputs (q, k, v) with stacked weights and no bias, whose q
  // and k are read only by the next step, a kHeadNormRope of both: with a kLinearStacked
  // tactic that step reads q and k from the stacked GEMM's output and copies v out of it
  // (no split_columns launch).
  bool stacked_into_head_norm = false;
  // kHeadNormRope of four nodes (q and k norms, then their ropes) whose rotated q and k are
  // read only by the next node, an attention, at the ropes' positions. Set on no other step.
  bool feeds_attention = false;
};

class CudaContextState final : public DeviceContextState {
 public:
  ~CudaContextState() override {
    for (CapturedGraph& g : graphs) {
      if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
    }
    for (ShapeGraphs& p : shape_graphs) {
      for (ShapeGraphs::Entry& e : p.graphs) (void)cudaGraphExecDestroy(e.exec);
    }
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    if (fault_host != nullptr) (void)cudaFreeHost(fault_host);
  }
  /// The kernels' error flag (kernels/conventions.h): mapped host memory, so that the runtime reads it
  /// after waiting for the context's work without a copy (take_input_fault). 0 = no fault.
  int* fault_host = nullptr;
  int* fault_device = nullptr;  // the same int as the kernels address it
  std::unique_ptr<cuda::CublasLtGemm> gemm;
  std::vector<CapturedGraph> graphs;      // per profile
  std::vector<ShapeGraphs> shape_graphs;  // per profile (those whose shapes vary)
  // Per network output: the progress slots its GEMV fills this call (HostOutputs::bind).
  std::vector<cuda::OutputProgress> host_progress;
  // The network's steps (fused chains and single nodes), planned on first use.
  std::vector<Step> steps;
  const Network* steps_for = nullptr;
  // cuBLASLt heuristics per (M, N, K, weight type, output type), so a call needs no host-side
  // query.
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int>, std::vector<cublasLtMatmulHeuristicResult_t>> algos;

  /// The index-th heuristic of the shape; out: the GEMM's output type (f32, or `type` for
  /// run_converted_rounded).
  Result<const cublasLtMatmulAlgo_t*> algo(int64_t m, int64_t n, int64_t k, DataType type, size_t index,
                                           DataType out = DataType::kF32) {
    auto key = std::make_tuple(m, n, k, static_cast<int>(type), static_cast<int>(out));
    auto it = algos.find(key);
    if (it == algos.end()) {
      std::vector<cublasLtMatmulHeuristicResult_t> found;
      GEARBOX_RETURN_IF_ERROR(gemm->heuristics(m, n, k, type, kAltAlgos + 1, &found, out));
      it = algos.emplace(key, std::move(found)).first;
    }
    if (it->second.empty()) return unimplemented("cuBLASLt has no algorithm for this GEMM");
    return &it->second[std::min(index, it->second.size() - 1)].algo;
  }
};

/// GEARBOX_CUDA_FUSION=0 runs every node by itself (for measuring what fusion buys): no fused
/// chains, the KV-cache write as its own launch before the split-KV and tensor-core
/// attentions, and no stacked-weight GEMMs offered to the builder.
bool fusion_enabled() {
  static const bool enabled = cuda::switch_on("GEARBOX_CUDA_FUSION");
  return enabled;
}

// ---- one node ---------------------------------------------------------------------------------------

/// Whether tensor t is a network input: written ahead of the network by no kernel of it (its
/// first kernel waits for whatever wrote them: run_all), so the decode attention may read
/// the positions before its wait.
bool network_input(const Network& net, int32_t t) {
  return std::any_of(net.inputs.begin(), net.inputs.end(), [&](const ir::InputSpec& s) { return s.tensor == t; });
}

/// Whether f32 tensors t and u of a launch share no byte (a fused launch that reads one while
/// it writes the other needs them apart: the memory plan keeps them so, bound tensors are
/// checked with this).
bool tensors_apart(const NodeArgs& a, int32_t t, int32_t u) {
  const auto bytes_of = [&](int32_t v) { return a.dims[static_cast<size_t>(v)].volume() * 4; };
  const auto* p = static_cast<const char*>(a.tensors[static_cast<size_t>(t)]);
  const auto* q = static_cast<const char*>(a.tensors[static_cast<size_t>(u)]);
  return p + bytes_of(t) <= q || q + bytes_of(u) <= p;
}

/// The context's error flag for the kernels (null outside a context: the builder's timing).
int* fault_flag(const NodeArgs& a) {
  const auto* state = static_cast<const CudaContextState*>(a.context);
  return state != nullptr ? state->fault_device : nullptr;
}

template <typename F>
Status by_weight_type(DataType type, F&& f) {
  switch (type) {
    case DataType::kF32: return f(float{});
    case DataType::kBF16: return f(__nv_bfloat16{});
    case DataType::kF16: return f(__half{});
    default: return internal_error("integer weights");
  }
}

/// Where a kLinearStacked tactic's GEMM output starts in the scratch: after the converted x.
int64_t stacked_output_offset(int64_t m, int64_t k, DataType type) {
  return (cuda::CublasLtGemm::scratch_bytes(m, k, type) + 255) / 256 * 256;
}

/// Whether a linear may take the kLinearStacked tactics.
bool stackable(const Network& net, const Node& node) {
  const DataType type = net.weights[static_cast<size_t>(node.weights[0])].dtype;
  return (type == DataType::kBF16 || type == DataType::kF16) &&
         node.outputs.size() <= static_cast<size_t>(cuda::kColumnSplitMaxTargets) &&
         ir::linear_weights_stacked(net, node);
}

std::vector<Step> plan_steps(const Network& net);

/// Whether the linear of `step` (nullable), a kGatedLinear step, writes gate and up rounded
/// to its 16-bit weights' type for the activation to read (run_gated_gemm): a cuBLASLt
/// tactic, no bias, and rows of whole 16-byte chunks (N % 8 == 0), so that both halves sit
/// 16-byte aligned in the gate tensor's memory (M x N f32 = two M x N 16-bit matrices).
/// Rounding the GEMM's output halves its stores and the activation's loads; each value the
/// activation reads then carries one bf16 / f16 rounding, as in HF's bf16 MLP.
bool rounded_gate_up(const Network& net, const Step* step, uint32_t tactic) {
  if (step == nullptr || step->kind != Step::kGatedLinear || is_gemv(tactic)) return false;
  const Node& linear = net.nodes[step->nodes[0]];
  const ir::WeightInfo& w = net.weights[static_cast<size_t>(linear.weights[0])];
  return (w.dtype == DataType::kBF16 || w.dtype == DataType::kF16) && linear.attrs.has_bias == 0 &&
         linear.outputs.size() == 2 && w.dims[0] % 8 == 0;
}

/// The step of `steps` whose first node is n, or null.
const Step* step_starting_at(const std::vector<Step>& steps, size_t n) {
  for (const Step& step : steps) {
    if (step.nodes.front() == n) return &step;
  }
  return nullptr;
}

/// rounded_gate_up for node n of `net` under `tactic` (the builder's timing and the memory
/// plan, which see a node, not a step); plans the steps only for a two-output cuBLASLt linear.
bool rounded_gate_up_node(const Network& net, size_t n, uint32_t tactic) {
  const Node& node = net.nodes[n];
  if (node.kind != OpKind::kLinear || node.outputs.size() != 2 || is_gemv(tactic)) return false;
  return rounded_gate_up(net, step_starting_at(plan_steps(net), n), tactic);
}

/// A GEMV's input computed by the GEMV itself: the residual step of a kNormAddNorm step whose
/// last norm only that linear reads (norm_into_gemv), its weights of the linear's type W,
/// which typed() restores.
using NormInput = cuda::GemvNormInput<void>;
template <typename W>
cuda::GemvNormInput<W> typed(const NormInput& n) {
  return {n.x, static_cast<const W*>(n.w_post), n.residual, n.sum, static_cast<const W*>(n.w_next), n.eps, n.offset};
}

/// A gated linear's gate and up as rounded_gate_up leaves them: [M, N] each, row stride ld
/// elements of the weights' type, in the memory of the linear's first output tensor.
struct RoundedGateUp {
  const void* gate = nullptr;
  const void* up = nullptr;
  int64_t ld = 0;
};

/// The progress slots bound for network tensor `t` where it is an output the host copies on as
/// it lands (HostOutputs); none for any other tensor, or without a context.
cuda::GemvProgress output_progress(const Network& net, const CudaContextState* state, int32_t t) {
  if (state == nullptr) return {};
  for (size_t o = 0; o < state->host_progress.size() && o < net.outputs.size(); ++o) {
    const cuda::OutputProgress& p = state->host_progress[o];
    if (net.outputs[o] == t && p.slots != nullptr) return {p.slots, p.count, p.every};
  }
  return {};
}

/// One node. input_in_scratch (a linear with a cuBLASLt tactic and 16-bit weights only):
/// its input is already in a.scratch, rounded to the weights' type (a fused producer wrote it).
/// stacked_out (a linear with a kLinearStacked tactic): the stacked GEMM's output [M, sum N_i]
/// is left in the scratch for the next step and its address stored here; no split.
/// rounded (the gate / up linear of a step where rounded_gate_up holds): the GEMMs write
/// gate and up rounded to the weights' type into the first output's memory, described here;
/// the second output tensor is not written.
Status run_cuda_node(const Network& net, const CudaWeights& weights, size_t n, uint32_t tactic, const NodeArgs& a,
                     const cuda::Launch& launch, bool input_in_scratch = false, const float** stacked_out = nullptr,
                     RoundedGateUp* rounded = nullptr, const NormInput* norm = nullptr) {
  const Node& node = net.nodes[n];
  auto in = [&](size_t i) { return a.tensors[static_cast<size_t>(node.inputs[i])]; };
  auto in_dims = [&](size_t i) -> const Dims& { return a.dims[static_cast<size_t>(node.inputs[i])]; };
  auto is_i64 = [&](size_t i) { return net.tensors[static_cast<size_t>(node.inputs[i])].dtype == DataType::kI64; };
  auto out = [&](size_t i) { return static_cast<float*>(a.tensors[static_cast<size_t>(node.outputs[i])]); };
  auto f = [&](size_t i) { return static_cast<const float*>(in(i)); };
  auto wid = [&](size_t i) { return static_cast<size_t>(node.weights[i]); };
  auto wdims = [&](size_t i) -> const Dims& { return net.weights[wid(i)].dims; };
  const ir::OpAttrs& at = node.attrs;
  auto* state = static_cast<CudaContextState*>(a.context);
  int* fault = fault_flag(a);
  const char* what = ir::op_kind_name(node.kind);

  switch (node.kind) {
    case OpKind::kEmbedding:
      return by_weight_type(weights.type[wid(0)], [&](auto w) {
        using W = decltype(w);
        return cuda_check(
            cuda::embedding<W>(in(0), is_i64(0), in_dims(0).volume(), static_cast<const W*>(weights.ptr[wid(0)]),
                               wdims(0)[0], wdims(0)[1], at.scale, out(0), fault, launch),
            what);
      });
    case OpKind::kRmsNorm: {
      const Dims& x = in_dims(0);
      const int64_t dim = at.head_dim > 0 ? at.head_dim : x[x.rank() - 1];
      return by_weight_type(weights.type[wid(0)], [&](auto w) {
        using W = decltype(w);
        return cuda_check(cuda::rms_norm<W>(f(0), static_cast<const W*>(weights.ptr[wid(0)]), out(0), x.volume() / dim,
                                            dim, at.eps, at.weight_offset, launch),
                          what);
      });
    }
    case OpKind::kLinear: {
      const Dims& x = in_dims(0);
      const int64_t m = ir::row_count(x), k = x[x.rank() - 1];
      const size_t outs = node.outputs.size();
      const DataType type = weights.type[wid(0)];
      auto bias = [&](size_t o) {
        return at.has_bias != 0 ? static_cast<const float*>(weights.ptr[wid(outs + o)]) : nullptr;
      };
      if (is_gemv(tactic)) {
        return by_weight_type(type, [&](auto w) -> Status {
          using W = decltype(w);
          const cuda::GemvNormInput<W> norm_input = norm != nullptr ? typed<W>(*norm) : cuda::GemvNormInput<W>{};
          // A host output the host copies on as it lands (host_outputs.h).
          const cuda::GemvProgress progress =
              outs == 1 ? output_progress(net, state, node.outputs[0]) : cuda::GemvProgress{};
          for (size_t first = 0; first < outs; first += cuda::kGemvMaxTargets) {
            cuda::GemvTarget<W> targets[cuda::kGemvMaxTargets];
            const size_t count = std::min<size_t>(cuda::kGemvMaxTargets, outs - first);
            for (size_t t = 0; t < count; ++t) {
              targets[t] = {static_cast<const W*>(weights.ptr[wid(first + t)]), bias(first + t), out(first + t),
                            wdims(first + t)[0]};
            }
            GEARBOX_RETURN_IF_ERROR(cuda_check(
                cuda::gemv_multi<W>(f(0), targets, static_cast<int>(count), m, k, launch, gemv_geometry(tactic), 0,
                                    norm != nullptr ? &norm_input : nullptr, progress),
                norm != nullptr ? "rms_norm + add + rms_norm + linear (fused gemv)" : "linear (gemv)"));
          }
          return Status();
        });
      }
      const auto alt = static_cast<size_t>(lt::heuristic(tactic, m));  // the heuristic at this call's rows
      // Several outputs of 16-bit weights (fused QKV, gate+up) share one conversion of x.
      const bool shared_input = (outs > 1 || input_in_scratch) && type != DataType::kF32;
      if (shared_input && !input_in_scratch) {
        GEARBOX_RETURN_IF_ERROR(cuda::CublasLtGemm::convert_input(f(0), type, m, k, a.scratch, launch));
      }
      const auto stacked_on_device = [&] {
        int64_t rows = 0;
        for (size_t o = 0; o < outs; ++o) {
          if (weights.ptr[wid(o)] != static_cast<const char*>(weights.ptr[wid(0)]) + rows * k * data_type_size(type)) {
            return false;
          }
          rows += wdims(o)[0];
        }
        return true;
      };
      if (rounded != nullptr) {
        // Gate then up, or the stacked [M, 2N], rounded to the weights' type, in out(0)'s memory.
        if (outs != 2 || at.has_bias != 0 || !shared_input) return internal_error("not a 16-bit gate / up linear");
        const int64_t width = wdims(0)[0];
        auto* base = reinterpret_cast<char*>(out(0));
        const auto bytes = static_cast<int64_t>(data_type_size(type));
        if (is_stacked(tactic)) {
          if (!stacked_on_device()) return internal_error("linear weights not stacked on the device");
          Result<const cublasLtMatmulAlgo_t*> algo = state->algo(m, 2 * width, k, type, alt, type);
          if (!algo.ok()) return algo.status();
          *rounded = {base, base + width * bytes, 2 * width};
          return state->gemm->run_converted_rounded(*algo, a.scratch, weights.ptr[wid(0)], type, base, m, 2 * width, k,
                                                    launch);
        }
        Result<const cublasLtMatmulAlgo_t*> algo = state->algo(m, width, k, type, alt, type);
        if (!algo.ok()) return algo.status();
        *rounded = {base, base + m * width * bytes, width};
        for (size_t o = 0; o < 2; ++o) {
          GEARBOX_RETURN_IF_ERROR(state->gemm->run_converted_rounded(*algo, a.scratch, weights.ptr[wid(o)], type,
                                                                     base + static_cast<int64_t>(o) * m * width * bytes,
                                                                     m, width, k, launch));
        }
        return {};
      }
      if (is_stacked(tactic)) {
        // One GEMM of sum N_i rows into the scratch after the converted x, then the columns.
        if (!stacked_on_device()) return internal_error("linear weights not stacked on the device");
        cuda::ColumnSplit split{};
        split.count = static_cast<int>(outs);
        int64_t total = 0;
        for (size_t o = 0; o < outs; ++o) {
          split.targets[o] = {out(o), bias(o), wdims(o)[0]};
          total += wdims(o)[0];
        }
        auto* y = reinterpret_cast<float*>(static_cast<char*>(a.scratch) + stacked_output_offset(m, k, type));
        Result<const cublasLtMatmulAlgo_t*> algo = state->algo(m, total, k, type, alt);
        if (!algo.ok()) return algo.status();
        GEARBOX_RETURN_IF_ERROR(
            state->gemm->run_converted(*algo, a.scratch, weights.ptr[wid(0)], type, nullptr, y, m, total, k, launch));
        if (stacked_out != nullptr) {
          *stacked_out = y;
          return {};
        }
        return cuda_check(cuda::split_columns(y, m, split, launch), "linear (stacked weights): split_columns");
      }
      for (size_t o = 0; o < outs; ++o) {
        Result<const cublasLtMatmulAlgo_t*> algo = state->algo(m, wdims(o)[0], k, type, alt);
        if (!algo.ok()) return algo.status();
        const void* w = weights.ptr[wid(o)];
        GEARBOX_RETURN_IF_ERROR(
            shared_input
                ? state->gemm->run_converted(*algo, a.scratch, w, type, bias(o), out(o), m, wdims(o)[0], k, launch)
                : state->gemm->run(*algo, f(0), w, type, bias(o), out(o), m, wdims(o)[0], k, a.scratch, launch));
      }
      return {};
    }
    case OpKind::kRope: {
      const Dims& x = in_dims(0);
      if (!node.weights.empty()) {
        return cuda_check(cuda::rope_with_freqs(f(0), in(1), is_i64(1), out(0), x[0] * x[1], at.heads, at.head_dim,
                                                weights.rope_table(node), at.scale, fault, launch),
                          what);
      }
      return cuda_check(cuda::rope(f(0), in(1), is_i64(1), out(0), x[0] * x[1], at.heads, at.head_dim, at.theta,
                                   at.scale, fault, launch),
                        what);
    }
    case OpKind::kAttention: {
      const Dims& q = in_dims(0);
      const int64_t t = q[0] * q[1];
      auto* k_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2]);
      auto* v_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2 + 1]);
      const int64_t width = static_cast<int64_t>(at.kv_heads) * at.head_dim;
      if (tactic == kAttentionSplitKv && fusion_enabled()) {  // writes the new rows itself
        return cuda_check(cuda::attention_decode(f(0), f(1), f(2), k_cache, v_cache, in(3), is_i64(3), out(0), t,
                                                 at.heads, at.kv_heads, at.head_dim, net.max_context, at.window,
                                                 at.scale, static_cast<float*>(a.scratch), kMaxSplits, fault, launch,
                                                 network_input(net, node.inputs[3])),
                          "attention (split-KV)");
      }
      if (tactic == kAttentionMma && fusion_enabled()) {  // its first kernel writes the new rows
        return cuda_check(cuda::attention_prefill_mma(f(0), f(1), f(2), k_cache, v_cache, in(3), is_i64(3), out(0), t,
                                                      at.heads, at.kv_heads, at.head_dim, net.max_context, at.window,
                                                      at.scale, static_cast<float*>(a.scratch), fault, launch),
                          "attention (tensor cores)");
      }
      GEARBOX_RETURN_IF_ERROR(cuda_check(cuda::kv_cache_write(f(1), f(2), in(3), is_i64(3), t, width, k_cache, v_cache,
                                                              net.max_context, fault, launch),
                                         "kv_cache_write"));
      if (tactic == kAttentionSplitKv) {
        return cuda_check(cuda::attention_decode(f(0), nullptr, nullptr, k_cache, v_cache, in(3), is_i64(3), out(0), t,
                                                 at.heads, at.kv_heads, at.head_dim, net.max_context, at.window,
                                                 at.scale, static_cast<float*>(a.scratch), kMaxSplits, fault, launch),
                          "attention (split-KV)");
      }
      if (tactic == kAttentionMma) {
        return cuda_check(
            cuda::attention_prefill_mma(f(0), nullptr, nullptr, k_cache, v_cache, in(3), is_i64(3), out(0), t, at.heads,
                                        at.kv_heads, at.head_dim, net.max_context, at.window, at.scale,
                                        static_cast<float*>(a.scratch), nullptr, launch),
            "attention (tensor cores)");
      }
      return cuda_check(cuda::attention_prefill(f(0), k_cache, v_cache, in(3), is_i64(3), out(0), t, at.heads,
                                                at.kv_heads, at.head_dim, net.max_context, at.window, at.scale,
                                                static_cast<float*>(a.scratch), launch),
                        "attention (tiled)");
    }
    case OpKind::kGeluTanhMul:
      return cuda_check(cuda::gelu_tanh_mul(f(0), f(1), out(0), in_dims(0).volume(), launch), what);
    case OpKind::kSiluMul: return cuda_check(cuda::silu_mul(f(0), f(1), out(0), in_dims(0).volume(), launch), what);
    case OpKind::kAdd: return cuda_check(cuda::add(f(0), f(1), out(0), in_dims(0).volume(), launch), what);
    case OpKind::kTakeLast: {
      const Dims& x = in_dims(0);
      return cuda_check(cuda::take_last(f(0), out(0), x[0], x[1], x[2], launch), what);
    }
  }
  return internal_error("unknown op kind in node " + node.name);
}

// ---- fused chains ---------------------------------------------------------------------------------
// The decode step is launch-bound (hundreds of small kernels), so chains of row-local ops
// run as one kernel each (kernels/norm_rope.cu, residual_norm.cu), decided per network from
// its structure:
//   kHeadNormRope: [rms_norm(q, per head), rms_norm(k, per head), rope(q'), rope(k')], or
//                  one [rms_norm, rope] pair, whose norm outputs feed only their rope. When
//                  the rotated q and k feed only the next node, an attention, a decode
//                  attention may compute the chain itself (head_norm_into_attention)
//   kNormAddNorm:  [rms_norm(x), add(residual, x'), rms_norm(sum)] or without the last norm,
//                  whose first norm output feeds only the add. When the next step's linear
//                  alone reads the last norm (the next layer's QKV, the MLP's gate and up)
//                  and runs cuBLASLt on 16-bit weights, the norm writes that linear's input
//                  converted into the scratch its GEMM reads (norm_add_norm_to; nothing runs
//                  between the two; norm_writes_gemm_input), so no conversion runs
//   kGatedLinear:  [linear(x) -> gate, up; gelu_tanh_mul or silu_mul(gate, up)], gate and up
//                  read by nothing else: one gemv_gated launch when the linear's tactic is
//                  the GEMV (decode), else the two nodes one after the other; and the
//                  linear after them when it alone reads the activation (the down
//                  projection): with a cuBLASLt tactic and 16-bit weights the activation
//                  writes its input converted (gated_activation_to), so no conversion runs
// Intermediates inside a chain are not written. The memory plan keeps every tensor a chain
// reads alive until the chain's last node (launch_group_ends), so a fused launch never
// writes over what another of its nodes still reads. GEARBOX_CUDA_FUSION=0 turns fusion
// off (fusion_enabled).

std::vector<Step> plan_steps(const Network& net) {
  std::vector<int> readers(net.tensors.size(), 0);
  for (const Node& node : net.nodes) {
    for (int32_t t : node.inputs) ++readers[static_cast<size_t>(t)];
  }
  for (int32_t t : net.outputs) ++readers[static_cast<size_t>(t)];
  auto node = [&](size_t i) -> const Node* { return i < net.nodes.size() ? &net.nodes[i] : nullptr; };
  auto only_reader_is = [&](const Node& producer, const Node* consumer, size_t input) {
    return consumer != nullptr && readers[static_cast<size_t>(producer.outputs[0])] == 1 &&
           consumer->inputs.size() > input && consumer->inputs[input] == producer.outputs[0];
  };
  auto wtype = [&](const Node& n) { return net.weights[static_cast<size_t>(n.weights[0])].dtype; };
  auto same_norm = [&](const Node& a, const Node& b) {
    return a.attrs.eps == b.attrs.eps && a.attrs.weight_offset == b.attrs.weight_offset &&
           a.attrs.head_dim == b.attrs.head_dim && wtype(a) == wtype(b);
  };
  auto head_norm = [](const Node* n) {
    return n != nullptr && n->kind == OpKind::kRmsNorm && n->attrs.head_dim > 0 && n->attrs.head_dim % 2 == 0 &&
           n->attrs.head_dim <= 1024;
  };
  auto row_norm = [](const Node* n) { return n != nullptr && n->kind == OpKind::kRmsNorm && n->attrs.head_dim == 0; };
  auto rope_of = [&](const Node& norm, const Node* rope) {
    return rope != nullptr && rope->kind == OpKind::kRope && rope->attrs.head_dim == norm.attrs.head_dim &&
           only_reader_is(norm, rope, 0);
  };

  auto gated_pair = [&](const Node* linear, const Node* act) {
    if (linear == nullptr || act == nullptr || linear->kind != OpKind::kLinear || linear->outputs.size() != 2 ||
        (act->kind != OpKind::kGeluTanhMul && act->kind != OpKind::kSiluMul)) {
      return false;
    }
    const auto gate = static_cast<size_t>(linear->outputs[0]), up = static_cast<size_t>(linear->outputs[1]);
    const auto& w = net.weights;
    return act->inputs[0] == linear->outputs[0] && act->inputs[1] == linear->outputs[1] && readers[gate] == 1 &&
           readers[up] == 1 &&
           w[static_cast<size_t>(linear->weights[0])].dims == w[static_cast<size_t>(linear->weights[1])].dims;
  };

  std::vector<Step> steps;
  const bool fuse = fusion_enabled();
  for (size_t i = 0; i < net.nodes.size();) {
    const Node* a = node(i);
    const Node *b = node(i + 1), *c = node(i + 2), *d = node(i + 3);
    if (fuse && head_norm(a) && head_norm(b) && same_norm(*a, *b) && rope_of(*a, c) && rope_of(*b, d) &&
        c->inputs[1] == d->inputs[1]) {
      const Node* e = node(i + 4);
      steps.push_back({Step::kHeadNormRope, {i, i + 1, i + 2, i + 3}});
      steps.back().feeds_attention = e != nullptr && e->kind == OpKind::kAttention && only_reader_is(*c, e, 0) &&
                                     only_reader_is(*d, e, 1) && e->inputs[3] == c->inputs[1] &&
                                     c->attrs.theta == d->attrs.theta && c->attrs.scale == d->attrs.scale &&
                                     c->weights == d->weights;
      i += 4;
    } else if (fuse && head_norm(a) && rope_of(*a, b)) {
      steps.push_back({Step::kHeadNormRope, {i, i + 1}});
      i += 2;
    } else if (fuse && row_norm(a) && b != nullptr && b->kind == OpKind::kAdd &&
               (only_reader_is(*a, b, 1) || only_reader_is(*a, b, 0))) {
      if (row_norm(c) && same_norm(*a, *c) && c->inputs[0] == b->outputs[0]) {
        const bool feeds_linear = d != nullptr && d->kind == OpKind::kLinear && only_reader_is(*c, d, 0);
        steps.push_back({Step::kNormAddNorm, {i, i + 1, i + 2}, feeds_linear});
        i += 3;
      } else {
        steps.push_back({Step::kNormAddNorm, {i, i + 1}});
        i += 2;
      }
    } else if (fuse && gated_pair(a, b)) {
      if (c != nullptr && c->kind == OpKind::kLinear && c->outputs.size() == 1 && only_reader_is(*b, c, 0)) {
        steps.push_back({Step::kGatedLinear, {i, i + 1, i + 2}});
        i += 3;
      } else {
        steps.push_back({Step::kGatedLinear, {i, i + 1}});
        i += 2;
      }
    } else {
      steps.push_back({Step::kSingle, {i}});
      i += 1;
    }
  }
  for (size_t st = 0; fuse && st + 1 < steps.size(); ++st) {
    const Step& next = steps[st + 1];
    if (steps[st].kind != Step::kSingle || next.kind != Step::kHeadNormRope || next.nodes.size() != 4) continue;
    const Node& linear = net.nodes[steps[st].nodes[0]];
    const Node& q_norm = net.nodes[next.nodes[0]];
    const Node& k_norm = net.nodes[next.nodes[1]];
    const auto read_once = [&](int32_t t) { return readers[static_cast<size_t>(t)] == 1; };
    steps[st].stacked_into_head_norm =
        linear.kind == OpKind::kLinear && linear.outputs.size() == 3 && linear.attrs.has_bias == 0 &&
        ir::linear_weights_stacked(net, linear) && q_norm.inputs[0] == linear.outputs[0] &&
        k_norm.inputs[0] == linear.outputs[1] && read_once(linear.outputs[0]) && read_once(linear.outputs[1]) &&
        net.weights[static_cast<size_t>(linear.weights[2])].dims[0] % q_norm.attrs.head_dim == 0;
  }
  return steps;
}

/// The activation of a kGatedLinear step's second node (gelu_tanh_mul or silu_mul).
cuda::GatedActivation gated_activation(const Node& act) {
  return act.kind == OpKind::kGeluTanhMul ? cuda::GatedActivation::kGeluTanh : cuda::GatedActivation::kSilu;
}

/// A stacked QKV linear's output left in the scratch (run_cuda_node's stacked_out) for the
/// kHeadNormRope step after it (Step::stacked_into_head_norm): y [M, row], q, k and v side
/// by side.
struct StackedQkv {
  const float* y = nullptr;
  int64_t row = 0;     // Nq + Nk + Nv floats
  int64_t k_col = 0;   // Nq
  int64_t v_col = 0;   // Nq + Nk
  float* v = nullptr;  // the linear's v output, which the step copies out of y
  int64_t v_heads = 0;
};

/// A fused chain. into_gemm_input (a kNormAddNorm step, norm_writes_gemm_input): the last
/// norm goes into the scratch, rounded to the weights' type, as the next linear's GEMM input;
/// its f32 output is never stored. qkv (a kHeadNormRope step of q and k): they are read from
/// the stacked output, and v is copied out of it in the same launch.
Status run_fused(const Network& net, const CudaWeights& weights, const Step& step, const NodeArgs& a,
                 const cuda::Launch& launch, bool into_gemm_input = false, const StackedQkv* qkv = nullptr) {
  auto tensor = [&](int32_t t) { return a.tensors[static_cast<size_t>(t)]; };
  auto weight = [&](const Node& n) { return weights.ptr[static_cast<size_t>(n.weights[0])]; };
  const Node& first = net.nodes[step.nodes[0]];
  const ir::OpAttrs& norm = first.attrs;
  int* fault = fault_flag(a);
  return by_weight_type(weights.type[static_cast<size_t>(first.weights[0])], [&](auto tag) -> Status {
    using W = decltype(tag);
    if (step.kind == Step::kHeadNormRope) {
      const size_t pairs = step.nodes.size() / 2;
      cuda::HeadNormRope<W> parts[cuda::kHeadNormRopeMaxParts];
      const Node& rope0 = net.nodes[step.nodes[pairs]];
      const Dims& x0 = a.dims[static_cast<size_t>(rope0.inputs[0])];
      for (size_t p = 0; p < pairs; ++p) {
        const Node& nn = net.nodes[step.nodes[p]];
        const Node& rope = net.nodes[step.nodes[pairs + p]];
        parts[p] = {static_cast<const float*>(tensor(nn.inputs[0])),
                    static_cast<const W*>(weight(nn)),
                    static_cast<float*>(tensor(rope.outputs[0])),
                    rope.attrs.heads,
                    rope.attrs.theta,
                    rope.attrs.scale,
                    weights.rope_table(rope)};
      }
      size_t count = pairs;
      if (qkv != nullptr) {
        parts[0].x = qkv->y;
        parts[1].x = qkv->y + qkv->k_col;
        parts[0].x_row_stride = parts[1].x_row_stride = qkv->row;
        parts[2] = {qkv->y + qkv->v_col, nullptr, qkv->v, qkv->v_heads, 0.0f, 0.0f, nullptr, qkv->row};
        count = 3;
      }
      const bool pos_i64 = net.tensors[static_cast<size_t>(rope0.inputs[1])].dtype == DataType::kI64;
      return cuda_check(
          cuda::head_norm_rope<W>(parts, static_cast<int>(count), tensor(rope0.inputs[1]), pos_i64, x0[0] * x0[1],
                                  norm.head_dim, norm.eps, norm.weight_offset, fault, launch),
          qkv != nullptr ? "rms_norm + rope (fused, from the stacked QKV output)" : "rms_norm + rope (fused)");
    }
    const Node& add = net.nodes[step.nodes[1]];
    const int32_t residual = add.inputs[0] == first.outputs[0] ? add.inputs[1] : add.inputs[0];
    const Dims& x = a.dims[static_cast<size_t>(first.inputs[0])];
    const int64_t dim = x[x.rank() - 1];
    const Node* next = step.nodes.size() == 3 ? &net.nodes[step.nodes[2]] : nullptr;
    if (into_gemm_input) {
      return cuda_check(cuda::norm_add_norm_to<W>(
                            static_cast<const float*>(tensor(first.inputs[0])), static_cast<const W*>(weight(first)),
                            static_cast<const float*>(tensor(residual)), static_cast<float*>(tensor(add.outputs[0])),
                            static_cast<const W*>(weight(*next)), static_cast<W*>(a.scratch), x.volume() / dim, dim,
                            norm.eps, norm.weight_offset, launch),
                        "rms_norm + add + rms_norm into the GEMM input (fused)");
    }
    return cuda_check(
        cuda::norm_add_norm<W>(static_cast<const float*>(tensor(first.inputs[0])), static_cast<const W*>(weight(first)),
                               static_cast<const float*>(tensor(residual)), static_cast<float*>(tensor(add.outputs[0])),
                               next != nullptr ? static_cast<const W*>(weight(*next)) : nullptr,
                               next != nullptr ? static_cast<float*>(tensor(next->outputs[0])) : nullptr,
                               x.volume() / dim, dim, norm.eps, norm.weight_offset, launch),
        "rms_norm + add + rms_norm (fused)");
  });
}

/// Whether the attention after a kHeadNormRope step computes that step itself
/// (cuda::attention_decode_head_norm): the step's rotated q and k are read only by that
/// attention (Step::feeds_attention), which runs the split-KV tactic on one token with
/// head_dim <= kAttentionMaxHeadDim, and its output overlaps none of the projections it reads;
/// and the launch before, the q / k / v projection, is a one-row GEMV of fewer blocks than
/// the device has SMs. Measured (docs/PERFORMANCE.md, 2026-12-02): the attention's loads before
/// its wait, and its clusters' placement, overlap the launch before it only where that launch
/// leaves SMs free; after a GEMV that fills them (the 1B's QKV, 384 blocks) they land on the
/// critical path and cost more than the separate launch (+2 us a layer), after one that does
/// not (the mini's) the step gains ~1.3 us a layer.
/// The memory plan keeps both steps' tensors apart (launch_group_ends).
bool head_norm_into_attention(const Network& net, const CudaWeights& weights, const Step* prev, const Step& step,
                              const Step* next, const NodeArgs& a, const std::vector<uint32_t>& tactics) {
  if (!step.feeds_attention || prev == nullptr || next == nullptr || prev->kind != Step::kSingle ||
      next->kind != Step::kSingle || tactics[next->nodes[0]] != kAttentionSplitKv ||
      !is_gemv(tactics[prev->nodes[0]])) {
    return false;
  }
  const Node& linear = net.nodes[prev->nodes[0]];
  if (linear.kind != OpKind::kLinear || linear.outputs.size() > static_cast<size_t>(cuda::kGemvMaxTargets)) {
    return false;
  }
  std::array<int64_t, cuda::kGemvMaxTargets> rows{};
  for (size_t o = 0; o < linear.outputs.size(); ++o) {
    rows[o] = net.weights[static_cast<size_t>(linear.weights[o])].dims[0];
  }
  const int64_t k = net.weights[static_cast<size_t>(linear.weights[0])].dims[1];
  const int64_t blocks =
      cuda::gemv_blocks(rows.data(), static_cast<int>(linear.outputs.size()), k,
                        static_cast<int64_t>(data_type_size(weights.type[static_cast<size_t>(linear.weights[0])])),
                        gemv_geometry(tactics[prev->nodes[0]]));
  if (blocks >= backend_limits().sm_count) return false;
  const Node& attention = net.nodes[next->nodes[0]];
  const Dims& q = a.dims[static_cast<size_t>(attention.inputs[0])];
  if (q[0] * q[1] != 1 || attention.attrs.head_dim > cuda::kAttentionMaxHeadDim) return false;
  const int32_t out = attention.outputs[0];
  return tensors_apart(a, out, net.nodes[step.nodes[0]].inputs[0]) &&
         tensors_apart(a, out, net.nodes[step.nodes[1]].inputs[0]) && tensors_apart(a, out, attention.inputs[2]);
}

/// The attention node n computing the q / k norms and RoPE of the kHeadNormRope step before it
/// (head_norm_into_attention holds): one attention_decode_head_norm launch.
Status run_attention_head_norm(const Network& net, const CudaWeights& weights, const Step& head_norm, size_t n,
                               const NodeArgs& a, const cuda::Launch& launch) {
  const Node& q_norm = net.nodes[head_norm.nodes[0]];
  const Node& k_norm = net.nodes[head_norm.nodes[1]];
  const Node& rope = net.nodes[head_norm.nodes[2]];
  const Node& node = net.nodes[n];
  const ir::OpAttrs& at = node.attrs;
  auto tensor = [&](int32_t t) { return static_cast<float*>(a.tensors[static_cast<size_t>(t)]); };
  auto weight = [&](const Node& w) { return weights.ptr[static_cast<size_t>(w.weights[0])]; };
  auto* k_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2]);
  auto* v_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2 + 1]);
  const bool pos_i64 = net.tensors[static_cast<size_t>(node.inputs[3])].dtype == DataType::kI64;
  return by_weight_type(weights.type[static_cast<size_t>(q_norm.weights[0])], [&](auto tag) -> Status {
    using W = decltype(tag);
    const cuda::AttentionHeadNorm<W> norm{static_cast<const W*>(weight(q_norm)),
                                          static_cast<const W*>(weight(k_norm)),
                                          q_norm.attrs.eps,
                                          q_norm.attrs.weight_offset,
                                          rope.attrs.theta,
                                          rope.attrs.scale,
                                          weights.rope_table(rope)};
    return cuda_check(cuda::attention_decode_head_norm<W>(
                          tensor(q_norm.inputs[0]), tensor(k_norm.inputs[0]), tensor(node.inputs[2]), k_cache, v_cache,
                          tensor(node.inputs[3]), pos_i64, tensor(node.outputs[0]), at.heads, at.kv_heads, at.head_dim,
                          net.max_context, at.window, at.scale, norm, static_cast<float*>(a.scratch), kMaxSplits,
                          fault_flag(a), launch, network_input(net, node.inputs[3])),
                      "rms_norm + rope + attention (split-KV)");
  });
}

/// A kGatedLinear step with the GEMV tactic: one gemv_gated launch.
Status run_gated_gemv(const Network& net, const CudaWeights& weights, const Step& step, uint32_t tactic,
                      const NodeArgs& a, const cuda::Launch& launch, const NormInput* norm = nullptr) {
  const Node& linear = net.nodes[step.nodes[0]];
  const Node& act = net.nodes[step.nodes[1]];
  const Dims& x = a.dims[static_cast<size_t>(linear.inputs[0])];
  const auto wid = [&](size_t i) { return static_cast<size_t>(linear.weights[i]); };
  const auto bias = [&](size_t o) {
    return linear.attrs.has_bias != 0 ? static_cast<const float*>(weights.ptr[wid(2 + o)]) : nullptr;
  };
  const cuda::GatedActivation activation = gated_activation(act);
  return by_weight_type(weights.type[wid(0)], [&](auto tag) -> Status {
    using W = decltype(tag);
    const cuda::GemvNormInput<W> norm_input = norm != nullptr ? typed<W>(*norm) : cuda::GemvNormInput<W>{};
    return cuda_check(cuda::gemv_gated<W>(static_cast<const float*>(a.tensors[static_cast<size_t>(linear.inputs[0])]),
                                          static_cast<const W*>(weights.ptr[wid(0)]),
                                          static_cast<const W*>(weights.ptr[wid(1)]), bias(0), bias(1), activation,
                                          static_cast<float*>(a.tensors[static_cast<size_t>(act.outputs[0])]),
                                          ir::row_count(x), net.weights[wid(0)].dims[0], x[x.rank() - 1], launch,
                                          gemv_geometry(tactic), 0, norm != nullptr ? &norm_input : nullptr),
                      norm != nullptr ? "rms_norm + add + rms_norm + linear + gated activation (fused gemv)"
                                      : "linear + gated activation (fused gemv)");
  });
}

/// A kGatedLinear step whose linear is a GEMM (its input already in the scratch when
/// input_in_scratch): the linear, then the activation; with a down
/// projection in the step that runs cuBLASLt on 16-bit weights, the activation writes its
/// output rounded to the weights' type into the scratch the GEMM reads (what its own
/// conversion would have written), and the f32 activation is never stored. Where
/// rounded_gate_up holds, the GEMMs write gate and up in the weights' type and the
/// activation reads them so (gated_activation_rows).
Status run_gated_gemm(const Network& net, const CudaWeights& weights, const Step& step,
                      std::span<const uint32_t> tactics, const NodeArgs& args, const cuda::Launch& launch,
                      bool input_in_scratch) {
  const auto run = [&](size_t node, bool in_scratch) {
    return run_cuda_node(net, weights, node, tactics[node], args, launch, in_scratch)
        .with_context(net.nodes[node].name);
  };
  const Node& act = net.nodes[step.nodes[1]];
  const bool has_down = step.nodes.size() == 3;
  const size_t down = has_down ? step.nodes[2] : step.nodes[1];
  const DataType type = has_down ? weights.type[static_cast<size_t>(net.nodes[down].weights[0])] : DataType::kF32;
  const bool into_down_gemm = has_down && !is_gemv(tactics[down]) && type != DataType::kF32;
  const size_t linear = step.nodes[0];
  if (rounded_gate_up(net, &step, tactics[linear])) {
    RoundedGateUp g;
    GEARBOX_RETURN_IF_ERROR(
        run_cuda_node(net, weights, linear, tactics[linear], args, launch, input_in_scratch, nullptr, &g)
            .with_context(net.nodes[linear].name));
    const Dims& gate_dims = args.dims[static_cast<size_t>(act.inputs[0])];
    const int64_t rows = ir::row_count(gate_dims), width = gate_dims[gate_dims.rank() - 1];
    const DataType gate_type = weights.type[static_cast<size_t>(net.nodes[linear].weights[0])];
    const bool to_down = into_down_gemm && type == gate_type;
    GEARBOX_RETURN_IF_ERROR(
        by_weight_type(gate_type, [&](auto tag) -> Status {
          using W = decltype(tag);
          if constexpr (std::is_same_v<W, float>) {
            return internal_error("f32 weights have no rounded gate / up");
          } else {
            const auto activate = [&](auto* out, const char* what) {
              return cuda_check(cuda::gated_activation_rows(static_cast<const W*>(g.gate), static_cast<const W*>(g.up),
                                                            g.ld, gated_activation(act), out, rows, width, launch),
                                what);
            };
            return to_down
                       ? activate(static_cast<W*>(args.scratch), "gated activation of 16-bit rows into the GEMM input")
                       : activate(static_cast<float*>(args.tensors[static_cast<size_t>(act.outputs[0])]),
                                  "gated activation of 16-bit rows");
          }
        }).with_context(act.name));
    if (step.nodes.size() == 2) return {};
    return run(down, to_down);
  }
  GEARBOX_RETURN_IF_ERROR(run(linear, input_in_scratch));
  if (!into_down_gemm) {
    for (size_t i = 1; i < step.nodes.size(); ++i) GEARBOX_RETURN_IF_ERROR(run(step.nodes[i], false));
    return {};
  }
  const auto tensor = [&](int32_t t) { return static_cast<const float*>(args.tensors[static_cast<size_t>(t)]); };
  const int64_t n = args.dims[static_cast<size_t>(act.inputs[0])].volume();
  GEARBOX_RETURN_IF_ERROR(by_weight_type(type, [&](auto tag) -> Status {
                            using W = decltype(tag);
                            return cuda_check(cuda::gated_activation_to(tensor(act.inputs[0]), tensor(act.inputs[1]),
                                                                        gated_activation(act),
                                                                        static_cast<W*>(args.scratch), n, launch),
                                              "gated activation into the GEMM input (fused)");
                          }).with_context(act.name));
  return run(down, true);
}

/// Whether a kNormAddNorm step writes its last norm into the scratch, rounded to the weights'
/// type, for the next step's linear (see plan_steps): that linear runs cuBLASLt on 16-bit
/// weights of the norms' type.
bool norm_writes_gemm_input(const Network& net, const CudaWeights& weights, const Step& step, const Step* next,
                            const std::vector<uint32_t>& tactics) {
  if (step.kind != Step::kNormAddNorm || !step.feeds_linear || next == nullptr) return false;
  const size_t linear = next->nodes[0];
  const DataType type = weights.type[static_cast<size_t>(net.nodes[linear].weights[0])];
  return !is_gemv(tactics[linear]) && type != DataType::kF32 &&
         weights.type[static_cast<size_t>(net.nodes[step.nodes[0]].weights[0])] == type;
}

/// Whether the GEMV of the step after a kNormAddNorm step computes that step in its prologue
/// (cuda::GemvNormInput), and with what: the step's last norm is read only by the next
/// step's linear (plan_steps), which runs the GEMV tactic as one launch (a single linear of
/// at most cuda::kGemvMaxTargets outputs, or a gated pair) on one row of K that the GEMV
/// serves with a norm input, with weights of the norms' type and 16-byte aligned vectors
/// (measured: docs/PERFORMANCE.md, 2026-12-01 eighth).
/// The memory plan keeps both steps' tensors apart (launch_group_ends).
std::optional<NormInput> norm_into_gemv(const Network& net, const CudaWeights& weights, const Step& step,
                                        const Step* next, const NodeArgs& a, const std::vector<uint32_t>& tactics) {
  if (!step.feeds_linear || next == nullptr || (next->kind != Step::kSingle && next->kind != Step::kGatedLinear)) {
    return std::nullopt;
  }
  const Node& linear = net.nodes[next->nodes[0]];
  if (linear.kind != OpKind::kLinear || !is_gemv(tactics[next->nodes[0]]) ||
      (next->kind == Step::kSingle && linear.outputs.size() > static_cast<size_t>(cuda::kGemvMaxTargets))) {
    return std::nullopt;
  }
  const Node& first = net.nodes[step.nodes[0]];
  const Node& add = net.nodes[step.nodes[1]];
  const Node& last = net.nodes[step.nodes[2]];
  const DataType type = weights.type[static_cast<size_t>(linear.weights[0])];
  if (weights.type[static_cast<size_t>(first.weights[0])] != type ||
      weights.type[static_cast<size_t>(last.weights[0])] != type) {
    return std::nullopt;
  }
  const Dims& x = a.dims[static_cast<size_t>(first.inputs[0])];
  const int64_t k = x[x.rank() - 1];
  bool served = false;
  (void)by_weight_type(type, [&](auto tag) -> Status {
    served = cuda::gemv_norm_input_served<decltype(tag)>(ir::row_count(x), k);
    return {};
  });
  const auto tensor = [&](int32_t t) { return static_cast<float*>(a.tensors[static_cast<size_t>(t)]); };
  const int32_t residual = add.inputs[0] == first.outputs[0] ? add.inputs[1] : add.inputs[0];
  const NormInput in{tensor(first.inputs[0]),  weights.ptr[static_cast<size_t>(first.weights[0])], tensor(residual),
                     tensor(add.outputs[0]),   weights.ptr[static_cast<size_t>(last.weights[0])],  first.attrs.eps,
                     first.attrs.weight_offset};
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!served || !aligned(in.x) || !aligned(in.residual) || !aligned(in.sum) || !aligned(in.w_post) ||
      !aligned(in.w_next)) {
    return std::nullopt;
  }
  // Every block reads x and residual while block 0 writes sum and the others their outputs:
  // none may overlap.
  const Node& writer = next->kind == Step::kGatedLinear ? net.nodes[next->nodes[1]] : linear;
  std::array<int32_t, 1 + cuda::kGemvMaxTargets> written{add.outputs[0]};
  const size_t count = 1 + writer.outputs.size();  // <= kGemvMaxTargets outputs (checked above)
  std::copy(writer.outputs.begin(), writer.outputs.end(), written.begin() + 1);
  for (size_t w = 0; w < count; ++w) {
    for (int32_t read : {first.inputs[0], residual}) {
      if (!tensors_apart(a, written[w], read)) return std::nullopt;
    }
    for (size_t v = w + 1; v < count; ++v) {
      if (!tensors_apart(a, written[w], written[v])) return std::nullopt;
    }
  }
  return in;
}

/// Every step of the network on `stream`.
Status run_all(const Network& net, const CudaWeights& weights, const NetworkLaunch& launch, cudaStream_t stream,
               const std::vector<Step>& steps) {
  const NodeArgs args{launch.tensors, launch.dims, launch.scratch, launch.states, launch.context};
  bool scratch_input = false;
  std::optional<NormInput> norm;    // the previous step's norms, for this step's GEMV
  const Step* head_norm = nullptr;  // the previous step (q / k norms and RoPE), for this step's attention
  // The first step that launches goes out plainly, so that the network's first kernel waits
  // for everything ahead of the network (launch.h): the decode attention reads the positions
  // input before its own wait. The steps after it are dependent launches where enabled.
  bool launched = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    const size_t n = step.nodes[0];
    Status s;
    // The step that runs next.
    const Step* next = i + 1 < steps.size() ? &steps[i + 1] : nullptr;
    // The previous step left its norms to this step's GEMV.
    const std::optional<NormInput> norm_input = norm;
    norm = norm_into_gemv(net, weights, step, next, args, launch.tactics);
    if (norm) {
      scratch_input = false;
      continue;
    }
    const Step* head_norm_step = head_norm;
    head_norm =
        head_norm_into_attention(net, weights, i > 0 ? &steps[i - 1] : nullptr, step, next, args, launch.tactics)
            ? &step
            : nullptr;
    if (head_norm != nullptr) {
      scratch_input = false;
      continue;
    }
    const cuda::Launch on = launch_on(stream, /*first_plain=*/!launched);
    launched = true;
    // The previous step wrote this step's linear input into the scratch.
    const bool input_in_scratch = scratch_input;
    scratch_input = norm_writes_gemm_input(net, weights, step, next, launch.tactics);
    if (head_norm_step != nullptr) {
      s = run_attention_head_norm(net, weights, *head_norm_step, n, args, on);
    } else if (step.kind == Step::kSingle) {
      // A stacked QKV linear whose output the next step (the q / k norms and RoPE) reads.
      const bool defer = step.stacked_into_head_norm && is_stacked(launch.tactics[n]);
      const float* stacked = nullptr;
      s = run_cuda_node(net, weights, n, launch.tactics[n], args, on, input_in_scratch, defer ? &stacked : nullptr,
                        nullptr, norm_input ? &*norm_input : nullptr);
      if (s.ok() && defer) {
        const Node& linear = net.nodes[n];
        const auto rows = [&](size_t o) { return net.weights[static_cast<size_t>(linear.weights[o])].dims[0]; };
        const int64_t head_dim = net.nodes[steps[i + 1].nodes[0]].attrs.head_dim;
        const StackedQkv qkv{stacked,
                             rows(0) + rows(1) + rows(2),
                             rows(0),
                             rows(0) + rows(1),
                             static_cast<float*>(args.tensors[static_cast<size_t>(linear.outputs[2])]),
                             rows(2) / head_dim};
        ++i;
        s = run_fused(net, weights, steps[i], args, on, false, &qkv);
      }
    } else if (step.kind != Step::kGatedLinear) {
      s = run_fused(net, weights, step, args, on, scratch_input);
    } else if (is_gemv(launch.tactics[n])) {
      s = run_gated_gemv(net, weights, step, launch.tactics[n], args, on, norm_input ? &*norm_input : nullptr);
      if (s.ok() && step.nodes.size() == 3) {  // the down projection
        const size_t down = step.nodes[2];
        s = run_cuda_node(net, weights, down, launch.tactics[down], args, on).with_context(net.nodes[down].name);
      }
    } else {  // a GEMM: the linear, then the activation (into the down projection's GEMM)
      s = run_gated_gemm(net, weights, step, launch.tactics, args, on, input_in_scratch);
    }
    if (!s.ok()) return s.with_context(net.nodes[n].name);
  }
  return {};
}

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

void cuda_free(void* p) {
  const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
  (void)cudaFree(p);
}

void cuda_free_host(void* p) {
  const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
  (void)cudaFreeHost(p);
}

// The spin ahead of a timed node (time_node): longer than the host takes to enqueue a
// node's launches, cuBLASLt's included.
constexpr int64_t kTimingSpinMicros = 200;

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

/// The builder's timing of a gated MLP's gate / up linear n (the first node of a
/// kGatedLinear step), as its step runs it: the step's linear and activation (without the
/// down projection) through run_gated_gemv / run_gated_gemm, the activation into a buffer of
/// its own (the builder allocates only the timed node's tensors; an f32 output where a
/// GEMM-fed down projection would read 16 bits, the same for every tactic of the node).
/// Empty for any other node. The caller holds the capture lock.
class GatedTiming {
 public:
  static Result<GatedTiming> for_node(const Network& net, size_t n, const NodeArgs& args) {
    GatedTiming g;
    if (net.nodes[n].kind != OpKind::kLinear || net.nodes[n].outputs.size() != 2) return g;
    const std::vector<Step> steps = plan_steps(net);
    const Step* step = step_starting_at(steps, n);
    if (step == nullptr || step->kind != Step::kGatedLinear) return g;
    g.pair_ = {Step::kGatedLinear, {n, step->nodes[1]}};
    const auto out = static_cast<size_t>(net.nodes[step->nodes[1]].outputs[0]);
    GEARBOX_CUDA(cudaMalloc(&g.out_, static_cast<size_t>(std::max<int64_t>(args.dims[out].volume(), 1)) * 4));
    g.tensors_.assign(args.tensors.begin(), args.tensors.end());
    g.tensors_[out] = g.out_;
    g.tactics_.assign(net.nodes.size(), kDefault);
    return g;
  }
  GatedTiming() = default;
  GatedTiming(const GatedTiming&) = delete;
  GatedTiming& operator=(const GatedTiming&) = delete;
  GatedTiming(GatedTiming&& o) noexcept
      : pair_(std::move(o.pair_)),
        out_(std::exchange(o.out_, nullptr)),
        tensors_(std::move(o.tensors_)),
        tactics_(std::move(o.tactics_)) {}
  ~GatedTiming() {
    if (out_ != nullptr) (void)cudaFree(out_);
  }

  bool applies() const { return out_ != nullptr; }
  /// The pair under `tactic` on the legacy stream.
  Status run(const Network& net, const CudaWeights& weights, uint32_t tactic, const NodeArgs& args) {
    const NodeArgs timed{tensors_, args.dims, args.scratch, args.states, args.context};
    if (is_gemv(tactic)) return run_gated_gemv(net, weights, pair_, tactic, timed, launch_on(nullptr));
    tactics_[pair_.nodes[0]] = tactic;
    return run_gated_gemm(net, weights, pair_, tactics_, timed, launch_on(nullptr), false);
  }

 private:
  Step pair_;
  float* out_ = nullptr;
  std::vector<void*> tensors_;     // the node's, and out_ as the activation's output
  std::vector<uint32_t> tactics_;  // per node: the linear's under test, else kDefault
};

/// GEARBOX_CUDA_TUNE_BY_ROWS=0: cuBLASLt linears keep the one heuristic timed at the
/// profile's opt rows (as before kernels 9).
bool tune_by_rows() {
  static const bool on = cuda::switch_on("GEARBOX_CUDA_TUNE_BY_ROWS");
  return on;
}

// Device bytes refine_by_rows may take for one linear's timing buffers; buckets above what
// fits take the largest timed bucket's heuristic.
constexpr int64_t kRefineBufferBytes = int64_t{1} << 30;

/// The median device time of enqueue() over 5 runs after one warm-up, each behind a spin (as
/// time_node), on the legacy stream. The caller holds the capture lock.
Result<double> median_device_us(const std::function<Status()>& enqueue) {
  const CudaEvent start(cudaEventDefault), stop(cudaEventDefault);
  if (start.get() == nullptr || stop.get() == nullptr) return device_error("cudaEventCreateWithFlags failed");
  std::vector<double> us;
  for (int run = 0; run < 6; ++run) {
    GEARBOX_CUDA(cuda::spin(kTimingSpinMicros, launch_on(nullptr)));
    GEARBOX_CUDA(cudaEventRecord(start.get(), nullptr));
    const Status s = enqueue();
    GEARBOX_CUDA(cudaEventRecord(stop.get(), nullptr));
    GEARBOX_CUDA(cudaEventSynchronize(stop.get()));
    GEARBOX_RETURN_IF_ERROR(s);
    float ms = 0.0f;
    GEARBOX_CUDA(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    if (run > 0) us.push_back(1000.0 * ms);
  }
  std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 2), us.end());
  return us[us.size() / 2];
}

/// refine_tactic for the CUDA device: a linear whose tactic runs cuBLASLt and whose row
/// count spans more than one bucket of linear_tactics.h over the profile gets a row-bucketed
/// tactic of the same form (stacked or per output), each bucket's heuristic the fastest of
/// kAltAlgos + 1 at the bucket's top row count (capped at the profile's max), timed on the
/// node's weights with the GEMMs the linear runs (16-bit outputs where rounded_gate_up
/// holds). Linears of the same GEMM shapes share one timing through `memo`.
Result<uint32_t> refine_by_rows(const Network& net, const CudaWeights& weights, size_t n, uint32_t tactic,
                                std::span<const Dims> min_dims, std::span<const Dims> max_dims,
                                DeviceBackend::TuningMemo& memo) {
  const Node& node = net.nodes[n];
  if (node.kind != OpKind::kLinear || !tune_by_rows() || is_gemv(tactic) || lt::is_by_rows(tactic)) return tactic;
  const Dims& x_min = min_dims[static_cast<size_t>(node.inputs[0])];
  const Dims& x_max = max_dims[static_cast<size_t>(node.inputs[0])];
  const int64_t lo = ir::row_count(x_min), hi = ir::row_count(x_max), k = x_max[x_max.rank() - 1];
  const int first = lt::row_bucket(std::max<int64_t>(lo, 1));
  int last = lt::row_bucket(hi);
  if (first == last) return tactic;
  const bool stacked = is_stacked(tactic);
  const DataType type = weights.type[static_cast<size_t>(node.weights[0])];
  const DataType out = rounded_gate_up_node(net, n, tactic) ? type : DataType::kF32;
  // The GEMMs the linear runs: one over the stacked rows, or one per output.
  std::vector<int64_t> widths;
  std::vector<const void*> w;
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    const int64_t rows = net.weights[static_cast<size_t>(node.weights[o])].dims[0];
    if (stacked && o > 0) {
      widths[0] += rows;
    } else {
      widths.push_back(rows);
      w.push_back(weights.ptr[static_cast<size_t>(node.weights[o])]);
    }
  }
  int64_t total = 0;
  for (int64_t width : widths) total += width;
  const auto rows_of = [&](int b) { return std::min(lt::bucket_top(b), hi); };
  const auto buffer_bytes = [&](int64_t m) { return m * k * 4 + m * total * 4; };
  while (last > first && buffer_bytes(rows_of(last)) > kRefineBufferBytes) --last;
  std::string key = std::to_string(static_cast<int>(type)) + "/" + std::to_string(static_cast<int>(out)) + "/" +
                    std::to_string(k) + "/" + std::to_string(first) + "-" + std::to_string(rows_of(last)) + "/";
  for (int64_t width : widths) key += std::to_string(width) + ",";
  // The widths in the key tell a stacked GEMM (one width) from one per output.
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  std::array<int, lt::kRowBuckets> best{};

  // Created (and destroyed) outside the lock, which its allocation takes itself.
  Result<std::unique_ptr<cuda::CublasLtGemm>> gemm = cuda::CublasLtGemm::create();
  if (!gemm.ok()) return gemm.status();
  const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
  const int64_t m_max = rows_of(last);
  const cuda::Launch timing = launch_on(nullptr);
  void* x = nullptr;
  void* y = nullptr;
  void* scratch = nullptr;
  const int64_t scratch_size = std::max<int64_t>(cuda::CublasLtGemm::scratch_bytes(m_max, k, type), 16);
  GEARBOX_CUDA(cudaMalloc(&x, static_cast<size_t>(m_max * k * 4)));
  const auto free_all = [&] {
    for (void* p : {x, y, scratch}) (void)cudaFree(p);
  };
  Status s = cuda_check(cudaMalloc(&y, static_cast<size_t>(m_max * total * 4)), "cudaMalloc");
  if (s.ok()) s = cuda_check(cudaMalloc(&scratch, static_cast<size_t>(scratch_size)), "cudaMalloc");
  // Inputs of a small, varied magnitude (0x3c3c3c3c: 0.0115 as f32, 0.0115 as bf16 pairs),
  // not zeros; the converted copy comes from it as the linear's would.
  if (s.ok()) s = cuda_check(cudaMemset(x, 0x3c, static_cast<size_t>(m_max * k * 4)), "cudaMemset");
  if (s.ok() && type != DataType::kF32) {
    s = cuda::CublasLtGemm::convert_input(static_cast<const float*>(x), type, m_max, k, scratch, timing);
  }
  for (int b = first; s.ok() && b <= last; ++b) {
    const int64_t m = rows_of(b);
    std::vector<std::vector<cublasLtMatmulHeuristicResult_t>> found(widths.size());
    size_t candidates = 0;
    for (size_t g = 0; g < widths.size() && s.ok(); ++g) {
      s = (*gemm)->heuristics(m, widths[g], k, type, kAltAlgos + 1, &found[g], out);
      candidates = std::max(candidates, found[g].size());
    }
    double best_us = -1.0;
    for (size_t i = 0; s.ok() && i < candidates; ++i) {
      Result<double> us = median_device_us([&]() -> Status {
        for (size_t g = 0; g < widths.size(); ++g) {
          const cublasLtMatmulAlgo_t* algo = &found[g][std::min(i, found[g].size() - 1)].algo;
          GEARBOX_RETURN_IF_ERROR(
              type == DataType::kF32 ? (*gemm)->run(algo, static_cast<const float*>(x), w[g], type, nullptr,
                                                    static_cast<float*>(y), m, widths[g], k, scratch, timing)
              : out == DataType::kF32
                  ? (*gemm)->run_converted(algo, scratch, w[g], type, nullptr, static_cast<float*>(y), m, widths[g], k,
                                           timing)
                  : (*gemm)->run_converted_rounded(algo, scratch, w[g], type, y, m, widths[g], k, timing));
        }
        return {};
      });
      if (!us.ok()) {
        s = us.status();
      } else if (best_us < 0 || *us < best_us) {
        best_us = *us;
        best[static_cast<size_t>(b)] = static_cast<int>(i);
      }
    }
  }
  free_all();
  GEARBOX_RETURN_IF_ERROR(s);
  for (int b = 0; b < first; ++b) best[static_cast<size_t>(b)] = best[static_cast<size_t>(first)];
  for (int b = last + 1; b < lt::kRowBuckets; ++b) best[static_cast<size_t>(b)] = best[static_cast<size_t>(last)];
  const uint32_t refined = lt::by_rows(stacked, best);
  memo.emplace(key, refined);
  return refined;
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
  DataType storage_type(DataType declared) const noexcept override {
    return declared == DataType::kI32 || declared == DataType::kI64 ? declared : DataType::kF32;
  }

  std::vector<TacticInfo> tactics(const Node& node) const override {
    switch (node.kind) {
      case OpKind::kLinear: {
        std::vector<TacticInfo> linear = {{kLinearCublasLt, "cublaslt"},
                                          {kLinearGemv, "gemv"},
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

  bool tactic_valid(const Network& net, const Node& node, uint32_t tactic,
                    std::span<const Dims> max_dims) const override {
    switch (node.kind) {
      case OpKind::kLinear: {
        const Dims& x = max_dims[static_cast<size_t>(node.inputs[0])];
        const bool gemv_k = x.rank() > 0 && x[x.rank() - 1] <= cuda::kGemvMaxK;  // the GEMV's longest row
        if (tactic == kLinearGemv) return gemv_k && ir::row_count(x) <= cuda::kGemvMaxRows;
        if (is_gemv(tactic)) {
          // GEARBOX_CUDA_GEMV_GEOMETRIES=0: the builder times the default geometry only.
          static const bool geometries = cuda::switch_on("GEARBOX_CUDA_GEMV_GEOMETRIES");
          return geometries && gemv_k && ir::row_count(x) == 1;
        }
        if (is_stacked(tactic)) return fusion_enabled() && stackable(net, node);
        return lt::is_per_output(tactic);
      }
      case OpKind::kAttention:
        if (node.attrs.head_dim > cuda::kAttentionMaxHeadDim) return false;
        if (tactic == kAttentionMma) return bf16_linears(net);
        return tactic == kAttentionSplitKv || tactic == kAttentionTiled;
      default: return tactic == kDefault;
    }
  }

  int64_t scratch_bytes(const Network& net, const Node& node, uint32_t tactic,
                        std::span<const Dims> dims) const override {
    const Dims& x = dims[static_cast<size_t>(node.inputs[0])];
    if (node.kind == OpKind::kLinear && !is_gemv(tactic)) {
      const DataType type = net.weights[static_cast<size_t>(node.weights[0])].dtype;
      const int64_t m = ir::row_count(x), k = x[x.rank() - 1];
      if (is_stacked(tactic)) {
        // A rounded gate / up GEMM writes into its output tensor, not the scratch.
        if (rounded_gate_up_node(net, static_cast<size_t>(&node - net.nodes.data()), tactic)) {
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
    GEARBOX_CUDA(cudaMemcpy(w->base, payload.data(), payload.size(), cudaMemcpyHostToDevice));
    for (const ir::WeightInfo& info : net.weights) {
      w->ptr.push_back(static_cast<const uint8_t*>(w->base) + info.offset);
      w->type.push_back(info.dtype);
    }
    GEARBOX_RETURN_IF_ERROR(upload_rope_tables(net, w.get()));
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
        "the vocabulary or a position outside the KV cache); that run's outputs are not valid");
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
    const std::vector<Step> steps = plan_steps(net);
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
    if (state == nullptr) return run_all(net, w, launch, s, plan_steps(net));
    if (state->steps_for != &net) {
      state->steps = plan_steps(net);
      state->steps_for = &net;
    }
    if (!launch.static_shapes) {
      if (!shape_graphs_enabled()) return run_all(net, w, launch, s, state->steps);
      return launch_shape_graph(net, w, launch, state->shape_graphs[static_cast<size_t>(launch.profile)], state->steps,
                                s);
    }
    // A static-shape profile: replay the graph captured with these addresses, or capture.
    CapturedGraph& g = state->graphs[static_cast<size_t>(launch.profile)];
    std::vector<void*> key = launch.tensors;
    key.insert(key.end(), launch.states.begin(), launch.states.end());
    key.push_back(launch.scratch);
    for (const cuda::OutputProgress& p : state->host_progress) key.push_back(p.slots);
    if (g.exec == nullptr || g.key != key) {
      if (g.exec != nullptr) GEARBOX_CUDA(cudaGraphExecDestroy(g.exec));
      g.exec = nullptr;
      const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
      Result<cudaGraphExec_t> exec = capture_graph(net, w, launch, s, state->steps);
      if (!exec.ok()) return exec.status();
      g.exec = *exec;
      g.key = std::move(key);
      GEARBOX_LOG(kDebug, "cuda: profile %d captured its graph for new addresses", launch.profile);
    }
    return cuda_check(cudaGraphLaunch(g.exec, s), "cudaGraphLaunch");
  }

  Status run_node(const Network& net, const DeviceWeights& weights, size_t node, uint32_t tactic,
                  const NodeArgs& args) const override {
    // Synchronous: the builder times it with a host clock.
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    GEARBOX_RETURN_IF_ERROR(
        run_cuda_node(net, static_cast<const CudaWeights&>(weights), node, tactic, args, launch_on(nullptr)));
    return cuda_check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }

  /// Device time between two events around the node's launches. A spin kernel ahead of them
  /// keeps the GPU busy while the host enqueues them, so the interval holds the node's
  /// kernels and the gaps between them (as in a captured graph), not the host's launch cost
  /// (which made a 5.7 us GEMV time at 12-14 us and could rank two attention kernels 20
  /// and 23 us apart either way).
  Result<double> time_node(const Network& net, const DeviceWeights& weights, size_t node, uint32_t tactic,
                           const NodeArgs& args) const override {
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    const CudaEvent start(cudaEventDefault), stop(cudaEventDefault);
    if (start.get() == nullptr || stop.get() == nullptr) return device_error("cudaEventCreateWithFlags failed");
    // A gate / up linear is timed as it runs: with its activation (fused into the GEMV, or a
    // launch after the GEMM), its outputs rounded to 16 bits where rounded_gate_up holds.
    const auto& w = static_cast<const CudaWeights&>(weights);
    Result<GatedTiming> gated = GatedTiming::for_node(net, node, args);
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
      if (is_gemv(tactic)) {
        tensors.assign(args.tensors.begin(), args.tensors.end());
        tensors[t] = timing_host_.get();
        run_args.tensors = tensors;
      }
    }
    GEARBOX_CUDA(cuda::spin(kTimingSpinMicros, launch_on(nullptr)));
    GEARBOX_CUDA(cudaEventRecord(start.get(), nullptr));
    const auto enqueue_start = std::chrono::steady_clock::now();
    Status s = gated->applies() ? gated->run(net, w, tactic, run_args)
                                : run_cuda_node(net, w, node, tactic, run_args, launch_on(nullptr));
    if (s.ok() && to_host >= 0 && !is_gemv(tactic)) {
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

std::mutex& cuda_capture_mutex() {
  static std::mutex* mutex = new std::mutex();  // never destroyed: frees may run at exit
  return *mutex;
}

Result<std::shared_ptr<const DeviceBackend>> cuda_backend() {
  static const Result<std::shared_ptr<const DeviceBackend>> backend =
      []() -> Result<std::shared_ptr<const DeviceBackend>> {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      return not_found("no CUDA device is available (no GPU or no driver); use --device cpu");
    }
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
    if (internal::host_bound_output(net, n) == t) return internal::is_gemv(tactics[n]);
  }
  return false;
}

}  // namespace gearbox::cuda
