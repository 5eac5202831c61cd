// cuda_kernels_bench group `generic`: each generic op (ir/network.h, kUnary .. kConstant) at
// the shapes of the case table the CUDA tests check (tests/support/generic_cases.h), launched
// through the CUDA dispatch (internal::run_node) as the engine launches it. The cases are
// small, so their data stays in L2 (no rotation): the times show launch and kernel overheads
// rather than DRAM bandwidth; the rate printed is the bytes of the node's inputs and outputs.
#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/dispatch.h"
#include "ir/shape_inference.h"
#include "runtime/device_backend.h"
#include "support/generic_cases.h"

namespace gearbox::kernel_bench {

void bench_generic(const cuda::Launch& on) {
  std::printf("\n== generic ops: one node of each case of tests/support/generic_cases.h ==\n");
  Result<std::shared_ptr<const internal::DeviceBackend>> device = internal::cuda_backend();
  check_status(device.status(), "cuda_backend");
  for (const testing::GenericCase& c : testing::generic_cases()) {
    const testing::CaseNetwork cn = testing::make_case_network(c);
    const ir::Network& net = cn.network;
    std::vector<Dims> input_dims;
    for (const ir::InputSpec& in : net.inputs) input_dims.push_back(in.dims);
    std::vector<Dims> dims;
    check_status(ir::infer_shapes(net, input_dims, dims), c.name.c_str());
    Result<std::shared_ptr<internal::DeviceWeights>> weights = (*device)->upload_weights(net, cn.payload);
    check_status(weights.status(), "upload_weights");
    const auto& w = static_cast<const internal::CudaWeights&>(**weights);
    std::vector<std::unique_ptr<DeviceMemory>> memory;
    std::vector<void*> tensors;
    double bytes = 0;
    for (size_t t = 0; t < net.tensors.size(); ++t) {
      const int64_t n = ir::tensor_bytes(dims[t], (*device)->storage_type(net.tensors[t].dtype));
      memory.push_back(std::make_unique<DeviceMemory>(static_cast<size_t>(n)));
      tensors.push_back(memory.back()->ptr);
      bytes += static_cast<double>(n);
    }
    for (size_t i = 0; i < net.inputs.size(); ++i) {
      const ir::InputSpec& in = net.inputs[i];
      const testing::TensorSpec spec = i < c.inputs.size()
                                           ? c.inputs[i]
                                           : testing::TensorSpec{net.tensors[static_cast<size_t>(in.tensor)].dtype,
                                                                 in.dims, testing::Values::kUniform, 0};
      const std::vector<uint8_t> values = testing::make_values(spec, testing::case_seed(c, i));
      CHECK(cudaMemcpy(tensors[static_cast<size_t>(in.tensor)], values.data(), values.size(), cudaMemcpyHostToDevice));
    }
    const internal::NodeArgs args{tensors, dims, nullptr, {}, nullptr};
    // The case's node (a bf16 / f16 case's network casts its output after it: not timed).
    const Timing t = time_launches(on.stream, 1, [&](int) {
      check_status(internal::run_node(net, w, 0, internal::kDefault, args, on), c.name.c_str());
    });
    print(c.name, t, bytes, 1e3, "GB/s");
  }
}

}  // namespace gearbox::kernel_bench
