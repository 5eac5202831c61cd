// `gearbox bench --batch B1,B2,...`: decode throughput of a batched engine (docs/ARCHITECTURE.md,
// "Batches and KV-cache slots") at several batch sizes. For each B, slots 0..B-1 are
// prefilled with the same prompt, then each decode step is one call of tokens [B, 1] (every
// row at its slot's next position) pinned to the profile taking [B, 1] with the fewest
// sequence positions (the engine's decode profile for B): with the logits copied to a Tensor,
// written into page-locked host memory (Engine::allocate_host), and left in device memory
// (what a caller sampling on the device pays).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner.h"

namespace gearbox::cli {

/// Median, p10, p90 and mean of a set of timings.
struct Stats {
  double median = 0, p10 = 0, p90 = 0, mean = 0;
};
/// The Stats of `v` (non-empty); percentiles are the nearest ranks.
Stats stats(std::vector<double> v);

/// What the batch section runs: the prompt in each slot and the timed steps per batch size,
/// bounded so that no row passes the engine's context.
struct BatchPlan {
  std::vector<int64_t> batches;
  int64_t prompt = 0;  ///< prompt tokens prefilled into each slot
  int64_t warmup = 0;  ///< untimed decode steps before the timed ones
  int64_t steps = 0;   ///< timed decode steps per batch size
};

/// Checks `batches` against the engine and plans the section: every B must be >= 1, at
/// most Engine::max_batch() and taken by some profile as a decode call (tokens [B, 1]); the
/// prompt is `context` tokens, clipped to the longest [1, S] a profile takes and to the
/// engine's context less the decode steps; `steps` is clipped so that the three passes' steps fit
/// the context left after the prompt. kInvalidArgument naming the value (and the profiles there are) otherwise.
Result<BatchPlan> plan_batches(const Runner& runner, const std::vector<int64_t>& batches, int64_t context,
                               int64_t steps);

/// Runs `plan` on the runner's session, prints a table and returns one JSON object per B
/// (batch, profile, prompt_tokens, steps, step_ms_median, step_ms_p10, step_ms_p90,
/// token_ms, tokens_per_s, speedup, pinned_logits_step_ms_median for the pass into
/// page-locked host memory, step_ms' three, tokens_per_s and speedup as device_logits_* for
/// the pass with the logits in device memory, speedup_vs_batch). Speedups compare aggregate tokens/s
/// with that of B = 1 where the list holds it, else of its first B. Each call is checked
/// outside the timed region (logits [B, 1, vocab] and finite; a decode step ran the profile
/// it pinned): `checked_calls` counts them and `problem` receives the first failure.
Result<nlohmann::ordered_json> bench_batches(Runner& runner, const BatchPlan& plan, int64_t& checked_calls,
                                             std::string& problem);

}  // namespace gearbox::cli
