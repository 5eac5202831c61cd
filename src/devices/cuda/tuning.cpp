#include "devices/cuda/tuning.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <string>

#include "devices/cuda/capture_lock.h"
#include "devices/cuda/dispatch.h"
#include "devices/cuda/kernels/elementwise.cuh"
#include "ir/shape_inference.h"

namespace gearbox::internal {

using ir::Network;
using ir::Node;
using ir::OpKind;

namespace {

// Device bytes refine_by_rows may take for one linear's timing buffers; buckets above what
// fits take the largest timed bucket's heuristic.
constexpr int64_t kRefineBufferBytes = int64_t{1} << 30;

}  // namespace

Result<GatedTiming> GatedTiming::for_node(const Network& net, const std::vector<Step>& steps, size_t n,
                                          const NodeArgs& args) {
  GatedTiming g;
  if (net.nodes[n].kind != OpKind::kLinear || net.nodes[n].outputs.size() != 2) return g;
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

GatedTiming::~GatedTiming() {
  if (out_ != nullptr) (void)cudaFree(out_);
}

Status GatedTiming::run(const Network& net, const CudaWeights& weights, uint32_t tactic, const NodeArgs& args) {
  const NodeArgs timed{tensors_, args.dims, args.scratch, args.states, args.context};
  if (is_gemv(tactic)) return run_gated_gemv(net, weights, pair_, tactic, timed, launch_on(nullptr));
  tactics_[pair_.nodes[0]] = tactic;
  return run_gated_gemm(net, weights, pair_, tactics_, timed, launch_on(nullptr), false);
}

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

Result<uint32_t> refine_by_rows(const Network& net, const CudaWeights& weights, size_t n, uint32_t tactic,
                                std::span<const Dims> min_dims, std::span<const Dims> max_dims,
                                DeviceBackend::TuningMemo& memo) {
  const Node& node = net.nodes[n];
  if (node.kind != OpKind::kLinear || is_gemv(tactic) || lt::is_by_rows(tactic)) return tactic;
  const Dims& x_min = min_dims[static_cast<size_t>(node.inputs[0])];
  const Dims& x_max = max_dims[static_cast<size_t>(node.inputs[0])];
  const int64_t lo = ir::row_count(x_min), hi = ir::row_count(x_max), k = x_max[x_max.rank() - 1];
  const int first = lt::row_bucket(std::max<int64_t>(lo, 1));
  int last = lt::row_bucket(hi);
  if (first == last) return tactic;
  const bool stacked = is_stacked(tactic);
  const DataType type = weights.type[static_cast<size_t>(node.weights[0])];
  const DataType out = rounded_gate_up_node(net, weights.steps, n, tactic) ? type : DataType::kF32;
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

}  // namespace gearbox::internal
