// Continuous batching for `gearbox generate --prompts-file / --prompt-ids-file`: several
// prompts share one session's KV-cache slots. A waiting prompt is admitted (prefilled in
// a free slot, together with the others admitted then where a profile takes their rows) as
// soon as a slot is free; every step decodes all running sequences in one call; a sequence
// that ends frees its slot at once.
//
//   BatchOptions options{.max_new = 32, .eos = {1}, .greedy = true};
//   Result<BatchOutcome> out = generate_batch(runner, prompts, options);
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runner.h"

namespace gearbox::cli {

/// How each sequence continues and ends.
struct BatchOptions {
  int64_t max_new = 32;      ///< tokens to generate at most per sequence
  std::vector<int64_t> eos;  ///< ids that end a sequence (kept in its output)
  /// Greedy: each row's next id is its first largest logit, found by the scan that checks
  /// the rows (next_token is not called).
  bool greedy = false;
  /// The next id from one row of `vocab` logits (rows in order: a sampler may hold state).
  std::function<int64_t(const float* logits, int64_t vocab)> next_token;
};

/// One prompt's outcome, with its timings (milliseconds of the calls it took part in).
struct SequenceResult {
  std::vector<int64_t> generated;
  double wait_ms = 0;     ///< from the start until its prefill began
  double prefill_ms = 0;  ///< its prefill call
  double decode_ms = 0;   ///< the decode calls it was a row of
};

/// Every prompt's result in input order, and the totals.
struct BatchOutcome {
  std::vector<SequenceResult> sequences;
  double wall_ms = 0;
  int64_t slots = 0;         ///< sequences run at once at most
  int64_t decode_calls = 0;  ///< decode steps (each one call over the running sequences)
  int64_t decode_rows = 0;   ///< their rows: tokens decoded
};

/// Generates for every prompt (each non-empty, its ids valid, prompt + max_new within the
/// context). Errors: the first failed call.
Result<BatchOutcome> generate_batch(Runner& runner, const std::vector<std::vector<int64_t>>& prompts,
                                    const BatchOptions& options);

}  // namespace gearbox::cli
