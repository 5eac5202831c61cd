#include "runtime/slot_table.h"

#include <string>

namespace gearbox::internal {
namespace {

int64_t value_at(const TensorView& t, int64_t i) {
  if (t.dtype == DataType::kI64) return static_cast<const int64_t*>(t.data)[i];
  return static_cast<const int32_t*>(t.data)[i];
}

constexpr int64_t kPadding = -1;  // a padding position, and the slot of a padding row

// Row `row`'s leading padding count.
int64_t leading_padding(const TensorView& positions, int64_t row, int64_t seq) {
  int64_t pad = 0;
  while (pad < seq && value_at(positions, row * seq + pad) == kPadding) ++pad;
  return pad;
}

}  // namespace

Status SlotTable::check(const TensorView& positions, const TensorView& slots) const {
  if (positions.memory != MemoryKind::kHost || slots.memory != MemoryKind::kHost) {
    return invalid_argument("a batched engine takes 'positions' and 'slots' in host memory (the session checks them)");
  }
  const int64_t rows = positions.dims[0], seq = positions.dims[1];
  if (slots.dims.rank() != 1 || slots.dims[0] != rows) {
    return invalid_argument("'slots' " + slots.dims.to_string() + " must hold one slot per row of 'positions' " +
                            positions.dims.to_string());
  }
  std::vector<bool> taken(lengths_.size(), false);
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t slot = value_at(slots, b);
    const std::string row = "row " + std::to_string(b) + " (slot " + std::to_string(slot) + ")";
    const int64_t pad = leading_padding(positions, b, seq);
    if (slot == kPadding) {
      if (pad != seq) return invalid_argument(row + " is a padding row, so every position must be -1");
      continue;
    }
    if (slot < 0 || slot >= size()) {
      return invalid_argument(row + ": the slot is outside [0, " + std::to_string(size()) +
                              ") (-1 marks a padding row)");
    }
    if (taken[static_cast<size_t>(slot)]) {
      return invalid_argument(row + ": the slot is named by an earlier row of this call");
    }
    taken[static_cast<size_t>(slot)] = true;
    if (pad == seq) continue;
    const int64_t first = value_at(positions, b * seq + pad);
    const int64_t length = lengths_[static_cast<size_t>(slot)];
    if (first < 0 || first > length) {
      return invalid_argument(row + " starts at position " + std::to_string(first) + ", but the slot holds " +
                              std::to_string(length) + " rows of its sequence: a row continues at most there " +
                              "(release the slot to start a new sequence at 0)");
    }
    for (int64_t t = pad; t < seq; ++t) {
      const int64_t p = value_at(positions, b * seq + t);
      if (p != first + (t - pad)) {
        return invalid_argument(row + " token " + std::to_string(t) + " has position " + std::to_string(p) +
                                "; after leading padding (-1) a row's positions are consecutive, so " +
                                std::to_string(first + (t - pad)) + " was expected");
      }
      if (p >= max_context_) {
        return invalid_argument(row + " token " + std::to_string(t) + " has position " + std::to_string(p) +
                                ", outside the context [0, " + std::to_string(max_context_) + ")");
      }
    }
  }
  return {};
}

void SlotTable::commit(const TensorView& positions, const TensorView& slots) {
  const int64_t rows = positions.dims[0], seq = positions.dims[1];
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t slot = value_at(slots, b);
    if (slot < 0 || slot >= size() || leading_padding(positions, b, seq) == seq) continue;
    lengths_[static_cast<size_t>(slot)] = value_at(positions, b * seq + seq - 1) + 1;
  }
}

Status SlotTable::release(int64_t slot) {
  if (slot < 0 || slot >= size()) {
    return invalid_argument("slot " + std::to_string(slot) + " is outside [0, " + std::to_string(size()) +
                            (size() == 0 ? "): the engine is not batched" : ")"));
  }
  lengths_[static_cast<size_t>(slot)] = 0;
  return {};
}

int64_t SlotTable::length(int64_t slot) const {
  return slot >= 0 && slot < size() ? lengths_[static_cast<size_t>(slot)] : 0;
}

}  // namespace gearbox::internal
