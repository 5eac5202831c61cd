// The KV-cache slots of a session on a batched network (docs/ARCHITECTURE.md, "Batches and
// KV-cache slots"): each slot's length, the rows its current sequence has written. A call's
// rows are checked against the lengths before anything runs, and the lengths move only
// after the call is enqueued, so that a rejected call changes nothing.
//
//   SlotTable slots(engine.network().slots, engine.network().max_context);
//   GEARBOX_RETURN_IF_ERROR(slots.check(positions, slots_view, dims));  // step 5
//   ... enqueue ...
//   slots.commit(positions, slots_view, dims);
#pragma once

#include <cstdint>
#include <vector>

#include "gearbox/engine.h"
#include "gearbox/status.h"

namespace gearbox::internal {

class SlotTable {
 public:
  SlotTable() = default;
  SlotTable(int64_t slots, int64_t max_context) : lengths_(static_cast<size_t>(slots), 0), max_context_(max_context) {}

  /// Checks a call: positions [rows, seq] and slots [rows], both in host memory. Each row
  /// has a slot in [0, slots) named by no other row, its positions leading -1 (padding)
  /// and then consecutive p0, p0 + 1, ... below the maximum context, with p0 at most the
  /// slot's length; or slot -1 and every position -1 (a padding row). Errors:
  /// kInvalidArgument naming the row, the slot and what is wrong.
  Status check(const TensorView& positions, const TensorView& slots) const;
  /// After a call that check() accepted is enqueued: each row's slot length becomes its
  /// last position + 1 (a rewind shortens it).
  void commit(const TensorView& positions, const TensorView& slots);
  /// Frees `slot` for a new sequence: its length becomes 0, so that the next sequence must
  /// start at position 0 and never reads rows it did not write. Errors: kInvalidArgument
  /// for a slot outside [0, slots).
  Status release(int64_t slot);
  /// Rows written to `slot` by its sequence (0 for a slot outside the table).
  int64_t length(int64_t slot) const;
  /// The number of slots (0 for a network without them).
  int64_t size() const noexcept { return static_cast<int64_t>(lengths_.size()); }

 private:
  std::vector<int64_t> lengths_;
  int64_t max_context_ = 0;
};

}  // namespace gearbox::internal
