// How fast a file's bytes reach the GPU (the engine load's weight upload): one cudaMemcpy
// from the file's mapping (pageable memory), against upload_to_device's page-locked staging
// at several cuts (lanes x chunk size, 2 buffers a lane) and at the plan the load uses; and
// the payload checksum's pass over the same mapping (which the load runs beside the upload).
// Each time is the median of REPEATS runs with the file in the page cache, staging
// allocation included; each way's bytes are read back and compared once, untimed.
//
//   build/cuda/bench/weight_upload_bench ENGINE_OR_ANY_LARGE_FILE [REPEATS]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/elapsed.h"
#include "devices/cuda/capture_lock.h"
#include "devices/cuda/weight_upload.h"
#include "format/engine_file.h"
#include "format/mapped_file.h"
#include "format/payload_digests.h"

namespace {

using namespace gearbox;

double median_ms(int repeats, const std::function<bool()>& run) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!run()) return -1;
    ms.push_back(internal::ms_since(t0));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: weight_upload_bench FILE [REPEATS]\n");
    return 2;
  }
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  Result<format::MappedFile> file = format::MappedFile::open(argv[1]);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.status().to_string().c_str());
    return 1;
  }
  const std::span<const uint8_t> src = file->bytes();
  const auto bytes = static_cast<int64_t>(src.size());
  void* dst = nullptr;
  if (cudaMalloc(&dst, std::max<size_t>(src.size(), 1)) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc of %lld bytes failed\n", static_cast<long long>(bytes));
    return 1;
  }
  std::vector<uint8_t> back(src.size());
  auto same = [&] {
    if (cudaMemcpy(back.data(), dst, back.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    return std::memcmp(back.data(), src.data(), src.size()) == 0;
  };
  auto report = [&](const std::string& what, double ms, bool ok) {
    std::printf("%-44s %9.1f ms  %6.2f GB/s%s\n", what.c_str(), ms, static_cast<double>(bytes) / 1e6 / ms,
                ok ? "" : "  WRONG BYTES");
  };
  std::printf("%s: %.1f MB, %d repeats, %u host threads\n", argv[1], static_cast<double>(bytes) / 1e6, repeats,
              std::thread::hardware_concurrency());
  const std::lock_guard<std::mutex> lock(internal::cuda_capture_mutex());
  (void)cudaFree(nullptr);  // the context, before any timing

  // The hash is the work; the verdict is not (the whole-payload digest is left 0).
  const format::PayloadDigests whole;
  const format::PayloadDigests chunked{0, format::kPayloadChunkBytes,
                                       format::chunk_digests(src, format::kPayloadChunkBytes)};
  report("xxh3 checksum, one pass (format 1-3)",
         median_ms(repeats,
                   [&] {
                     (void)format::check_payload(src, whole);
                     return true;
                   }),
         true);
  report("xxh3 checksum, 32 MiB chunks on threads (4)",
         median_ms(repeats, [&] { return format::check_payload(src, chunked).ok(); }), true);
  (void)cudaMemset(dst, 0, src.size());
  const double plain = median_ms(
      repeats, [&] { return cudaMemcpy(dst, src.data(), src.size(), cudaMemcpyHostToDevice) == cudaSuccess; });
  report("one cudaMemcpy from the mapping", plain, same());

  std::vector<std::pair<std::string, internal::StagingPlan>> plans = {
      {"staged, the load's plan", internal::weight_upload_plan(bytes)}};
  for (const int32_t lanes : {1, 2, 4, 8}) {
    for (const int64_t mib : {4, 8, 16, 32}) {
      plans.emplace_back("staged, " + std::to_string(lanes) + " lanes x 2 x " + std::to_string(mib) + " MiB",
                         internal::plan_staging(bytes, lanes, 2, mib << 20));
    }
  }
  for (const auto& [what, plan] : plans) {
    (void)cudaMemset(dst, 0, src.size());
    const double ms = median_ms(repeats, [&] { return internal::upload_to_device(dst, src, plan).ok(); });
    report(what + " (" + std::to_string(plan.lanes) + " lanes)", ms, ms >= 0 && same());
  }
  (void)cudaFree(dst);
  return 0;
}
