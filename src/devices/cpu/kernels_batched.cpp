// CPU kernels of batched networks (docs/ARCHITECTURE.md, "Batches and KV-cache slots"):
// RoPE and attention over B rows, each with its own positions (left-padded with -1) and
// its own KV-cache slot, built on the one-sequence kernels so that a row computes exactly
// what the same sequence computes alone.
//
//   x, q, k, v  [B, S, width]     positions [B, S]     slots [B]
//   caches      [slots * max_ctx, kv_width] (K and V), slot s at rows s * max_ctx on

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "devices/cpu/kernels.h"

namespace gearbox::cpu {
namespace {

int64_t value_at(const void* values, DataType type, int64_t i) {
  return type == DataType::kI64 ? static_cast<const int64_t*>(values)[i] : static_cast<const int32_t*>(values)[i];
}

const void* offset_by(const void* values, DataType type, int64_t i) {
  return static_cast<const char*>(values) + i * static_cast<int64_t>(data_type_size(type));
}

bool is_index_type(DataType type) { return type == DataType::kI32 || type == DataType::kI64; }

}  // namespace

Result<std::vector<int64_t>> row_padding(const void* positions, DataType pos_type, int64_t rows, int64_t seq) {
  if (!is_index_type(pos_type)) {
    return invalid_argument(std::string("positions must be i32 or i64, not ") + data_type_name(pos_type));
  }
  std::vector<int64_t> padding(static_cast<size_t>(rows), 0);
  for (int64_t b = 0; b < rows; ++b) {
    int64_t pad = 0;
    while (pad < seq && value_at(positions, pos_type, b * seq + pad) == kPaddingPosition) ++pad;
    for (int64_t t = pad; t < seq; ++t) {
      const int64_t p = value_at(positions, pos_type, b * seq + t);
      if (p < 0) {
        return out_of_range("position " + std::to_string(p) + " of row " + std::to_string(b) + " token " +
                            std::to_string(t) + " is negative and not leading padding (-1)");
      }
    }
    padding[static_cast<size_t>(b)] = pad;
  }
  return padding;
}

Status rope_rows(const float* x, const void* positions, DataType pos_type, float* y, int64_t rows, int64_t seq,
                 int64_t heads, int64_t head_dim, std::span<const float> inv_freq, float position_scale) {
  Result<std::vector<int64_t>> padding = row_padding(positions, pos_type, rows, seq);
  if (!padding.ok()) return padding.status();
  const int64_t width = heads * head_dim;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t pad = (*padding)[static_cast<size_t>(b)];
    const int64_t first = b * seq;
    if (x != y) std::memmove(y + first * width, x + first * width, static_cast<size_t>(pad * width) * sizeof(float));
    GEARBOX_RETURN_IF_ERROR(rope_with_freqs(x + (first + pad) * width, offset_by(positions, pos_type, first + pad),
                                            pos_type, y + (first + pad) * width, seq - pad, heads, head_dim, inv_freq,
                                            position_scale));
  }
  return Status::ok_status();
}

Status attention_rows(const SlotAttention& a, const AttentionShape& shape, bool tiled, float* scratch) {
  const int64_t rows = a.rows, seq = a.seq;
  if (!is_index_type(a.slot_type)) {
    return invalid_argument(std::string("slots must be i32 or i64, not ") + data_type_name(a.slot_type));
  }
  Result<std::vector<int64_t>> padding = row_padding(a.positions, a.pos_type, rows, seq);
  if (!padding.ok()) return padding.status();
  // Every row is checked before any cache row is written: a bad call writes nothing.
  std::vector<bool> taken(static_cast<size_t>(a.slot_count), false);
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t slot = value_at(a.slots, a.slot_type, b);
    const int64_t pad = (*padding)[static_cast<size_t>(b)];
    if (slot == kPaddingSlot) {
      if (pad != seq) {
        return out_of_range("row " + std::to_string(b) + " has slot -1 (padding) but positions that are not -1");
      }
      continue;
    }
    if (slot < 0 || slot >= a.slot_count) {
      return out_of_range("slot " + std::to_string(slot) + " of row " + std::to_string(b) + " is outside [0, " +
                          std::to_string(a.slot_count) + ")");
    }
    if (taken[static_cast<size_t>(slot)]) {
      return out_of_range("slot " + std::to_string(slot) + " is named by two rows of one call");
    }
    taken[static_cast<size_t>(slot)] = true;
    for (int64_t t = pad; t < seq; ++t) {
      const int64_t p = value_at(a.positions, a.pos_type, b * seq + t);
      if (p >= a.max_ctx) {
        return out_of_range("position " + std::to_string(p) + " of row " + std::to_string(b) +
                            " is outside the KV cache [0, " + std::to_string(a.max_ctx) + ")");
      }
    }
  }
  const int64_t q_width = shape.heads * shape.head_dim;
  const int64_t kv_width = shape.kv_heads * shape.head_dim;
  const int64_t cache_floats = a.max_ctx * kv_width;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t slot = value_at(a.slots, a.slot_type, b);
    const int64_t pad = (*padding)[static_cast<size_t>(b)];
    const int64_t first = b * seq;
    std::fill_n(a.out + first * q_width, pad * q_width, 0.0f);
    if (slot == kPaddingSlot || pad == seq) continue;
    const int64_t start = first + pad, count = seq - pad;
    const void* row_positions = offset_by(a.positions, a.pos_type, start);
    float* k_cache = a.k_cache + slot * cache_floats;
    float* v_cache = a.v_cache + slot * cache_floats;
    GEARBOX_RETURN_IF_ERROR(kv_cache_write(a.k + start * kv_width, a.v + start * kv_width, row_positions, a.pos_type,
                                           count, kv_width, k_cache, v_cache, a.max_ctx));
    AttentionShape row = shape;
    row.T = count;
    const float* q = a.q + start * q_width;
    float* out = a.out + start * q_width;
    if (tiled) {
      attention_tiled(q, k_cache, v_cache, row_positions, a.pos_type, out, row, scratch);
    } else {
      attention_rowwise(q, k_cache, v_cache, row_positions, a.pos_type, out, row, scratch);
    }
  }
  return Status::ok_status();
}

}  // namespace gearbox::cpu
