// The payload checksum a load verifies, on a payload the size of the Gemma-3-1B engine's
// (2.0 GB): one XXH3-64 pass over it (format versions 1 to 3) against one XXH3-64 per
// 32 MiB chunk on the host's threads (version 4). Google Benchmark; the numbers go to
// docs/PERFORMANCE.md and docs/decisions/0031.
//
//   build/release/bench/payload_check_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "format/engine_file.h"
#include "format/payload_digests.h"

namespace {

using namespace gearbox;

constexpr uint64_t kPayloadBytes = uint64_t{2000} << 20;

const std::vector<uint8_t>& payload() {
  static const std::vector<uint8_t> bytes = [] {
    std::vector<uint8_t> b(kPayloadBytes);
    for (uint64_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>((i * 2654435761u) >> 17);
    return b;
  }();
  return bytes;
}

// Arg 0: the whole payload on one thread; 1: its chunks on the host's threads.
void BM_PayloadCheck(benchmark::State& state) {
  const std::vector<uint8_t>& p = payload();
  format::PayloadDigests digests;
  if (state.range(0) == 1) {
    digests.chunk_bytes = format::kPayloadChunkBytes;
    digests.chunks = format::chunk_digests(p, format::kPayloadChunkBytes);
  } else {
    digests.whole = format::chunk_digests(p, p.size())[0];
  }
  for (auto _ : state) {
    if (!format::check_payload(p, digests).ok()) state.SkipWithError("the payload does not match its digests");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(p.size()));
}
BENCHMARK(BM_PayloadCheck)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
