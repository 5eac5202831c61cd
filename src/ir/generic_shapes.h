// Shape rules of the generic ops (network.h): broadcasting, shape specs, slices and the
// per-node inference that shape_inference.cpp calls. Devices use the same helpers, so a
// rule is written once.
//
//   Dims out;
//   if (!ir::broadcast_dims({a, b}, out)) ...;   // [2, 1, 5] and [3, 1] -> [2, 3, 5]
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "gearbox/dims.h"
#include "gearbox/status.h"
#include "ir/network.h"

namespace gearbox::ir {

/// Numpy broadcasting of `shapes` (aligned right, each extent equal or 1) into `out`.
/// False when two extents differ and neither is 1.
bool broadcast_dims(std::span<const Dims> shapes, Dims& out);
inline bool broadcast_dims(std::initializer_list<Dims> shapes, Dims& out) {
  return broadcast_dims(std::span<const Dims>(shapes.begin(), shapes.size()), out);
}

/// Row-major strides (in elements) of `dims` as seen from an output of rank `rank` that
/// `dims` broadcasts to: aligned right, 0 where an extent is 1 (repeated) or missing.
std::vector<int64_t> broadcast_strides(const Dims& dims, int32_t rank);

/// The elements kSlice takes along one axis: x[start + i * step] for i in [0, count).
struct SliceRange {
  int64_t start = 0;
  int64_t count = 0;
  int64_t step = 1;
};
/// Python's slice of an axis of `extent` by {start, end, step} (step >= 1): negative start
/// and end count from the end, then both clamp to [0, extent].
SliceRange slice_range(int64_t extent, int64_t start, int64_t end, int64_t step) noexcept;

/// The dims a kReshape (`expand` false) or kExpand (`expand` true) shape spec gives for an
/// input of dims `x` (network.h, "Shape spec"). Errors name the spec value and x's dims;
/// `what` prefixes them.
Result<Dims> resolve_shape_spec(std::span<const int64_t> spec, const Dims& x, bool expand);

/// Infers the outputs of node `n`, a generic op, into `dims` from its inputs' dims there.
/// Errors: kInvalidArgument starting with `label` ("node 7 'mm' (matmul)").
Status infer_generic_node(const Network& net, size_t n, const std::string& label, std::vector<Dims>& dims);

/// Whether `kind` is one of the generic ops (kUnary and after).
inline bool is_generic_op(OpKind kind) noexcept {
  return static_cast<uint32_t>(kind) >= static_cast<uint32_t>(OpKind::kUnary);
}

}  // namespace gearbox::ir
