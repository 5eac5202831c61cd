// cuda_kernels_bench groups `graph_launch` and `input_copy`: what the host pays to launch a
// decode step's graph and to bring a call's inputs to the GPU.
#include "bench_common.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "devices/cuda/gemm_cublaslt.h"
#include "devices/cuda/host_progress.h"
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/kernels/embedding.cuh"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/kernels/norm_rope.cuh"
#include "devices/cuda/kernels/prefill_attention.cuh"
#include "devices/cuda/kernels/prefill_attention_mma.cuh"
#include "devices/cuda/kernels/residual_norm.cuh"

namespace gearbox::kernel_bench {

// ---- graph launch -------------------------------------------------------------------------------

/// What a decode step's graph costs the host to launch, by its number of kernel nodes
/// (1-element adds launched as every kernel is, programmatic dependent launch included):
/// the cudaGraphLaunch call alone, and the launch until the stream is drained, with and
/// without cudaGraphUpload after instantiation.
void bench_graph_launch(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== graph launch: host time of cudaGraphLaunch and of launch + drain, by kernel nodes ==\n");
  DeviceMemory a(16), b(16);
  CHECK(cudaMemset(a.ptr, 0, 16));
  CHECK(cudaMemset(b.ptr, 0, 16));
  using Clock = std::chrono::steady_clock;
  const auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  for (int nodes : {28, 220, 420}) {
    for (int upload = 0; upload < 2; ++upload) {
      cudaGraph_t graph = nullptr;
      CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < nodes; ++i) CHECK(cuda::add(a.as<float>(), b.as<float>(), a.as<float>(), 1, on));
      CHECK(cudaStreamEndCapture(stream, &graph));
      cudaGraphExec_t exec = nullptr;
      CHECK(cudaGraphInstantiate(&exec, graph, 0));
      if (upload == 1) CHECK(cudaGraphUpload(exec, stream));
      for (int w = 0; w < 5; ++w) CHECK(cudaGraphLaunch(exec, stream));
      CHECK(cudaStreamSynchronize(stream));
      std::vector<double> call, total;
      for (int r = 0; r < 200; ++r) {
        const auto t0 = Clock::now();
        CHECK(cudaGraphLaunch(exec, stream));
        const auto t1 = Clock::now();
        CHECK(cudaStreamSynchronize(stream));
        const auto t2 = Clock::now();
        call.push_back(us(t1 - t0));
        total.push_back(us(t2 - t0));
      }
      std::sort(call.begin(), call.end());
      std::sort(total.begin(), total.end());
      std::printf("%4d nodes%s  cudaGraphLaunch %7.2f us (p90 %7.2f)  launch + drain %8.2f us (p90 %8.2f)\n", nodes,
                  upload == 1 ? ", uploaded" : "          ", call[100], call[180], total[100], total[180]);
      CHECK(cudaGraphExecDestroy(exec));
      CHECK(cudaGraphDestroy(graph));
    }
  }
}

// ---- a call's host inputs ----------------------------------------------------------------------

/// What a decode call's inputs (a token id and a position, 8 bytes each) cost on its way to
/// the GPU: from a drained stream, the host writes them into page-locked memory, enqueues
/// the copies and then a graph of 28 one-element adds whose first node reads them, and waits
/// for the stream. Each way's launch to return by the host's clock (the copies and the graph
/// enqueued, then the drain), the ways interleaved over the same 300 calls: two 8-byte copies
/// (the session's way), one copy of both packed 8 or 64 bytes apart (16 or 72 bytes), none
/// (the graph's first kernel reads the mapped page-locked memory itself), and the graph alone.
void bench_input_copy(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== a decode call's two 8-byte host inputs: copies, then a 28-node graph, launch to drain ==\n");
  char* pinned = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 256, cudaHostAllocMapped));
  std::memset(pinned, 0, 256);
  DeviceMemory staging(256), b(16), out(16);
  CHECK(cudaMemset(staging.ptr, 0, 256));
  CHECK(cudaMemset(b.ptr, 0, 16));
  struct Way {
    const char* name;
    int copies;        // 0, 1 or 2
    int64_t second;    // the second input's offset
    bool mapped_read;  // the first kernel reads the page-locked memory itself
  };
  const Way ways[] = {{"two 8-byte copies", 2, 64, false},
                      {"one 16-byte copy", 1, 8, false},
                      {"one 72-byte copy", 1, 64, false},
                      {"no copy: the first kernel reads mapped memory", 0, 8, true},
                      {"no inputs: the graph alone", 0, 8, false}};
  constexpr int kWays = sizeof(ways) / sizeof(ways[0]);
  cudaGraphExec_t exec[kWays] = {};
  for (int k = 0; k < kWays; ++k) {
    const char* src = ways[k].mapped_read ? pinned : static_cast<const char*>(staging.ptr);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CHECK(cuda::add(reinterpret_cast<const float*>(src), reinterpret_cast<const float*>(src + ways[k].second),
                    out.as<float>(), 1, on));
    for (int i = 1; i < 28; ++i) CHECK(cuda::add(out.as<float>(), b.as<float>(), out.as<float>(), 1, on));
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec[k], graph, 0));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaGraphUpload(exec[k], stream));
  }
  using Clock = std::chrono::steady_clock;
  const auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  std::vector<double> enqueue[kWays], total[kWays];
  const int64_t token = 7, position = 127;
  for (int r = 0; r < 320; ++r) {
    for (int k = 0; k < kWays; ++k) {
      const Way& way = ways[k];
      const auto t0 = Clock::now();
      if (way.copies > 0 || way.mapped_read) {
        std::memcpy(pinned, &token, 8);
        std::memcpy(pinned + way.second, &position, 8);
      }
      if (way.copies == 2) {
        CHECK(cudaMemcpyAsync(staging.ptr, pinned, 8, cudaMemcpyDefault, stream));
        CHECK(cudaMemcpyAsync(staging.as<char>() + way.second, pinned + way.second, 8, cudaMemcpyDefault, stream));
      } else if (way.copies == 1) {
        CHECK(cudaMemcpyAsync(staging.ptr, pinned, static_cast<size_t>(way.second + 8), cudaMemcpyDefault, stream));
      }
      CHECK(cudaGraphLaunch(exec[k], stream));
      const auto t1 = Clock::now();
      CHECK(cudaStreamSynchronize(stream));
      const auto t2 = Clock::now();
      if (r >= 20) {
        enqueue[k].push_back(us(t1 - t0));
        total[k].push_back(us(t2 - t0));
      }
    }
  }
  for (int k = 0; k < kWays; ++k) {
    std::sort(enqueue[k].begin(), enqueue[k].end());
    std::sort(total[k].begin(), total[k].end());
    const size_t n = total[k].size();
    std::printf("%-48s enqueued in %6.2f us (p90 %6.2f)  launch to return %7.2f us (p10 %7.2f, p90 %7.2f)\n",
                ways[k].name, enqueue[k][n / 2], enqueue[k][n * 9 / 10], total[k][n / 2], total[k][n / 10],
                total[k][n * 9 / 10]);
    CHECK(cudaGraphExecDestroy(exec[k]));
  }
  CHECK(cudaFreeHost(pinned));
}

}  // namespace gearbox::kernel_bench
