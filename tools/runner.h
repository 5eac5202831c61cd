// What the run, generate, score and bench commands share: loading an engine on a device,
// one session, and a call with token ids at consecutive positions under a request.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "gearbox/engine.h"
#include "gearbox/profile_selection.h"

namespace gearbox::cli {

/// "cpu", "cuda" or "auto" (CUDA when this build and machine have it).
Result<DeviceKind> device_from_flag(const std::string& flag);

class Runner {
 public:
  static Result<Runner> open(const std::string& path, DeviceKind device);

  /// Runs `ids` at positions start.. under `request` (unset: no guard). Fills `logits`
  /// and the wall time of the call in milliseconds.
  Status call(const std::vector<int64_t>& ids, int64_t start, const ProfileRequest& request, Tensor& logits,
              double* ms = nullptr);
  /// The same with `logits` in caller memory (device memory: the call returns once the
  /// work is enqueued, and `ms` is the host's time to enqueue it).
  Status call(const std::vector<int64_t>& ids, int64_t start, const ProfileRequest& request, TensorView& logits,
              double* ms = nullptr);

  /// One row of call_rows: token ids at positions start.. in KV-cache slot `slot`.
  struct Row {
    std::vector<int64_t> ids;
    int64_t start = 0;
    int64_t slot = 0;
  };
  /// Runs several sequences in one call of a batched engine (automatic profile selection):
  /// rows left-padded to the longest (docs/ARCHITECTURE.md, "Batches and KV-cache slots").
  /// `logits` receives [rows, 1, vocab]. On an engine without slots, one row in slot 0.
  Status call_rows(const std::vector<Row>& rows, Tensor& logits, double* ms = nullptr);
  /// The same with `logits` in caller memory (host memory: the call waits for them).
  Status call_rows(const std::vector<Row>& rows, TensorView& logits, double* ms = nullptr);
  /// Whether some profile takes `tokens` of these dims ([rows, seq]).
  bool fits(const Dims& tokens) const;
  /// The sequences one session holds at once: the engine's KV-cache slots, capped by the
  /// largest batch of its profiles; 1 for an engine without slots.
  int64_t capacity() const;

  /// A fresh session (a new KV cache).
  Status reset();

  const Engine& engine() const noexcept { return engine_; }
  Session& session() noexcept { return session_; }
  /// The vocabulary size, from the engine's metadata.
  int64_t vocab() const noexcept { return vocab_; }
  /// The profile index called `name`, or -1.
  int32_t profile_index(const std::string& name) const;
  /// "1 'prefill'".
  std::string profile_label(int32_t profile) const;

 private:
  template <typename Output>
  Status call_rows_with(const std::vector<Row>& rows, Output& logits, double* ms);
  template <typename Output>
  Status call_with(const std::vector<int64_t>& ids, int64_t start, const ProfileRequest& request, Output& logits,
                   double* ms);
  Runner(Engine engine, Session session, int64_t vocab)
      : engine_(std::move(engine)), session_(std::move(session)), vocab_(vocab) {}
  Engine engine_;
  Session session_;
  int64_t vocab_;
};

/// The error for a non-finite logit of `token` in the row for `position`.
Status non_finite_logit(int64_t token, int64_t position);

/// An error naming the first NaN or infinite value of one row of `vocab` logits at `x`
/// (`position`: the token position the row is for): sampling or scoring from it means
/// nothing, and sorting NaN is undefined behaviour.
Status check_finite_logits(const float* x, int64_t vocab, int64_t position);

/// The same for every row of `logits` ([1, T, V] or the last position's [1, 1, V]), the
/// last row at position `last_position`.
Status check_finite_logits(const Tensor& logits, int64_t last_position);

/// log-softmax of row `row` of `logits` ([1, T, V]) at `id`.
double log_prob(const Tensor& logits, int64_t row, int64_t id);

}  // namespace gearbox::cli
