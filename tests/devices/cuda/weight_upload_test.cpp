// The CUDA weight upload (devices/cuda/weight_upload.h): bytes from pageable host memory to
// the device through page-locked staging, over awkward sizes and cuts (small chunks so that
// every lane reuses its buffers many times), read back and compared byte for byte, with
// sentinel bytes after the destination. Label `gpu`: skipped without a CUDA device. The
// chunking and its error paths are tested on the CPU (staged_copy_test.cpp).
#include "devices/cuda/weight_upload.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "devices/cuda/capture_lock.h"

namespace gearbox::internal {
namespace {

bool have_cuda() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Uploads `bytes` cut as `plan` says and reads them back; "" when every byte and sentinel
// is right, else what went wrong.
std::string upload_and_compare(int64_t bytes, const StagingPlan& plan) {
  std::vector<uint8_t> src(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; ++i) src[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 131 + i / 251) % 251);
  constexpr size_t kSentinel = 64;
  void* dst = nullptr;
  if (cudaMalloc(&dst, src.size() + kSentinel) != cudaSuccess) return "cudaMalloc failed";
  std::string problem;
  if (cudaMemset(dst, 0xCD, src.size() + kSentinel) != cudaSuccess) problem = "cudaMemset failed";
  if (problem.empty()) {
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    const Status s = upload_to_device(dst, src, plan);
    if (!s.ok()) problem = s.to_string();
  }
  std::vector<uint8_t> back(src.size() + kSentinel);
  if (problem.empty() && cudaMemcpy(back.data(), dst, back.size(), cudaMemcpyDeviceToHost) != cudaSuccess) {
    problem = "cudaMemcpy back failed";
  }
  for (size_t i = 0; problem.empty() && i < back.size(); ++i) {
    const uint8_t want = i < src.size() ? src[i] : uint8_t{0xCD};
    if (back[i] != want) problem = "byte " + std::to_string(i) + " is " + std::to_string(back[i]);
  }
  (void)cudaFree(dst);
  return problem;
}

TEST(WeightUpload, EveryByteArrivesThroughTheStaging) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t bytes :
       {int64_t{1}, int64_t{4095}, int64_t{4096}, int64_t{4097}, int64_t{13 * 4096 + 7}, int64_t{1000003}}) {
    for (const int32_t lanes : {1, 3, 4}) {
      for (const int32_t buffers : {1, 2}) {
        const StagingPlan plan = plan_staging(bytes, lanes, buffers, 4096);
        EXPECT_EQ(upload_and_compare(bytes, plan), "")
            << bytes << " bytes, " << lanes << " lanes, " << buffers << " buffers";
      }
    }
  }
}

TEST(WeightUpload, TheWeightPlanCoversALargeUpload) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const int64_t bytes = (int64_t{8} << 20) * 9 + 12345;  // 10 chunks of the weight plan
  const StagingPlan plan = weight_upload_plan(bytes);
  EXPECT_GE(plan.lanes, 1);
  EXPECT_EQ(plan.chunks, 10);
  EXPECT_EQ(upload_and_compare(bytes, plan), "");
}

}  // namespace
}  // namespace gearbox::internal
