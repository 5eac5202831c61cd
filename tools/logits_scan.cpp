#include "logits_scan.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <thread>

namespace gearbox::cli {
namespace {

// Independent lanes, so that the compiler keeps the running maxima and the exponent checks
// in vector registers.
constexpr int64_t kLanes = 16;
constexpr uint32_t kExponent = 0x7f800000u;  // all ones: infinity or NaN

bool non_finite(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return (bits & kExponent) == kExponent;
}

}  // namespace

LogitsScan scan_logits(const float* x, int64_t vocab) {
  std::array<float, kLanes> most;
  std::array<uint32_t, kLanes> bad{};
  most.fill(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= vocab; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) {
      const float v = x[i + j];
      bad[static_cast<size_t>(j)] |= non_finite(v) ? 1u : 0u;
      most[static_cast<size_t>(j)] = v > most[static_cast<size_t>(j)] ? v : most[static_cast<size_t>(j)];
    }
  }
  float best = -std::numeric_limits<float>::infinity();
  uint32_t any_bad = 0;
  for (int64_t j = 0; j < kLanes; ++j) {
    best = std::max(best, most[static_cast<size_t>(j)]);
    any_bad |= bad[static_cast<size_t>(j)];
  }
  for (; i < vocab; ++i) {
    any_bad |= non_finite(x[i]) ? 1u : 0u;
    best = std::max(best, x[i]);
  }
  LogitsScan scan;
  if (any_bad != 0) {
    scan.first_non_finite = std::find_if(x, x + vocab, non_finite) - x;
    return scan;
  }
  scan.argmax = std::find(x, x + vocab, best) - x;
  return scan;
}

std::vector<LogitsScan> scan_rows(const float* x, int64_t rows, int64_t vocab, int threads) {
  std::vector<LogitsScan> out(static_cast<size_t>(std::max<int64_t>(rows, 0)));
  const auto scan_range = [&](int64_t first, int64_t end) {
    for (int64_t r = first; r < end; ++r) out[static_cast<size_t>(r)] = scan_logits(x + r * vocab, vocab);
  };
  const int64_t workers = std::clamp<int64_t>(threads, 1, std::max<int64_t>(rows, 1));
  if (workers == 1) {
    scan_range(0, rows);
    return out;
  }
  std::vector<std::jthread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  const int64_t per = (rows + workers - 1) / workers;
  for (int64_t w = 1; w < workers; ++w) {
    const int64_t first = std::min(rows, w * per), end = std::min(rows, first + per);
    pool.emplace_back([&scan_range, first, end] { scan_range(first, end); });
  }
  scan_range(0, std::min(rows, per));
  pool.clear();  // joins every thread before `out` is returned
  return out;
}

}  // namespace gearbox::cli
