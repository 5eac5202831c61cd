#include "ir/generic_shapes.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace gearbox::ir {
namespace {

Dims make_dims(const std::vector<int64_t>& e) { return Dims(std::span<const int64_t>(e)); }
std::vector<int64_t> extents(const Dims& d) { return {d.extents().begin(), d.extents().end()}; }

class GenericInferer {
 public:
  GenericInferer(const Network& net, size_t n, const std::string& label, std::vector<Dims>& dims)
      : net_(net), node_(net.nodes[n]), label_(label), dims_(dims) {}

  Status run() {
    const OpAttrs& a = node_.attrs;
    switch (node_.kind) {
      case OpKind::kUnary:
      case OpKind::kCast: return set(in(0));
      case OpKind::kBinary: return broadcast_inputs({"a", "b"});
      case OpKind::kWhere: return broadcast_inputs({"cond", "a", "b"});
      case OpKind::kReduce: return reduce();
      case OpKind::kSoftmax:
      case OpKind::kLayerNorm: return normalize();
      case OpKind::kMatmul: return matmul();
      case OpKind::kSdpa: return sdpa();
      case OpKind::kPermute: return permute();
      case OpKind::kReshape:
      case OpKind::kExpand: {
        Result<Dims> out = resolve_shape_spec(a.ints, in(0), node_.kind == OpKind::kExpand);
        if (!out.ok()) return fail(out.status().message());
        return set(*out);
      }
      case OpKind::kSlice: {
        const Dims& x = in(0);
        GEARBOX_RETURN_IF_ERROR(need_axis(x, "x"));
        const SliceRange r = slice_range(x[a.axis], a.ints[0], a.ints[1], a.ints[2]);
        std::vector<int64_t> e = extents(x);
        e[static_cast<size_t>(a.axis)] = r.count;
        return set(make_dims(e));
      }
      case OpKind::kConcat: return concat();
      case OpKind::kIndexSelect: {
        const Dims& x = in(0);
        const Dims& index = in(1);
        GEARBOX_RETURN_IF_ERROR(need_axis(x, "x"));
        if (index.rank() != 1) return fail("index " + index.to_string() + " must have rank 1");
        std::vector<int64_t> e = extents(x);
        e[static_cast<size_t>(a.axis)] = index[0];
        return set(make_dims(e));
      }
      case OpKind::kGather: {
        const Dims& x = in(0);
        const Dims& index = in(1);
        GEARBOX_RETURN_IF_ERROR(need_axis(x, "x"));
        if (index.rank() != x.rank()) {
          return fail("index " + index.to_string() + " and x " + x.to_string() + " differ in rank");
        }
        for (int32_t d = 0; d < x.rank(); ++d) {
          if (d != a.axis && index[d] > x[d]) {
            return fail("index " + index.to_string() + " is larger than x " + x.to_string() + " at dim " +
                        std::to_string(d));
          }
        }
        return set(index);
      }
      case OpKind::kConstant: return set(net_.weights[static_cast<size_t>(node_.weights[0])].dims);
      default: return fail("is not a generic op");
    }
  }

 private:
  const Dims& in(size_t i) const { return dims_[static_cast<size_t>(node_.inputs[i])]; }
  Status set(const Dims& d) {
    dims_[static_cast<size_t>(node_.outputs[0])] = d;
    return {};
  }
  Status fail(const std::string& what) const { return invalid_argument(label_ + ": " + what); }
  Status need_axis(const Dims& x, const char* what) const {
    if (node_.attrs.axis < x.rank()) return {};
    return fail("axis " + std::to_string(node_.attrs.axis) + " is outside " + what + " " + x.to_string());
  }

  Status broadcast_inputs(std::initializer_list<const char*> names) {
    std::vector<Dims> shapes;
    for (size_t i = 0; i < node_.inputs.size(); ++i) shapes.push_back(in(i));
    Dims out;
    if (!broadcast_dims(shapes, out)) {
      std::string list;
      size_t i = 0;
      for (const char* name : names) {
        list += (i == 0                  ? ""
                 : i + 1 == names.size() ? " and "
                                         : ", ") +
                std::string(name) + " " + shapes[i].to_string();
        ++i;
      }
      return fail(list + " do not broadcast");
    }
    return set(out);
  }

  Status reduce() {
    const Dims& x = in(0);
    const std::vector<int64_t>& axes = node_.attrs.ints;
    std::vector<bool> reduced(static_cast<size_t>(x.rank()), axes.empty());
    for (int64_t ax : axes) {
      if (ax >= x.rank()) return fail("axis " + std::to_string(ax) + " is outside x " + x.to_string());
      reduced[static_cast<size_t>(ax)] = true;
    }
    const bool keepdim = (node_.attrs.flags & kFlagKeepdim) != 0;
    std::vector<int64_t> e;
    for (int32_t d = 0; d < x.rank(); ++d) {
      if (!reduced[static_cast<size_t>(d)]) {
        e.push_back(x[d]);
      } else if (keepdim) {
        e.push_back(1);
      }
    }
    return set(make_dims(e));
  }

  Status normalize() {
    const Dims& x = in(0);
    if (node_.kind == OpKind::kSoftmax) {
      GEARBOX_RETURN_IF_ERROR(need_axis(x, "x"));
      return set(x);
    }
    if (x.rank() < 1) return fail("x " + x.to_string() + " must have rank >= 1");
    const int64_t f = x[x.rank() - 1];
    for (int32_t w : node_.weights) {
      const WeightInfo& wi = net_.weights[static_cast<size_t>(w)];
      if (wi.dims[0] != f) {
        return fail("x " + x.to_string() + " has last dim " + std::to_string(f) + " but weight '" + wi.name + "' has " +
                    std::to_string(wi.dims[0]));
      }
    }
    return set(x);
  }

  Status matmul() {
    const Dims& a = in(0);
    const Dims& b = in(1);
    if (a.rank() < 2 || b.rank() < 2) {
      return fail("a " + a.to_string() + " and b " + b.to_string() + " must both have rank >= 2");
    }
    const int64_t k = a[a.rank() - 1];
    const int64_t kb = b[b.rank() - 2];
    if (k != kb) {
      return fail("a " + a.to_string() + " and b " + b.to_string() + " do not multiply: K " + std::to_string(k) +
                  " vs " + std::to_string(kb));
    }
    Dims batch;
    if (!broadcast_dims({batch_of(a, 2), batch_of(b, 2)}, batch)) {
      return fail("the batch dims of a " + a.to_string() + " and b " + b.to_string() + " do not broadcast");
    }
    std::vector<int64_t> e = extents(batch);
    e.push_back(a[a.rank() - 2]);
    e.push_back(b[b.rank() - 1]);
    return set(make_dims(e));
  }

  Status sdpa() {
    const Dims& q = in(0);
    const Dims& k = in(1);
    const Dims& v = in(2);
    if (q.rank() < 2 || k.rank() < 2 || v.rank() < 2) {
      return fail("q " + q.to_string() + ", k " + k.to_string() + " and v " + v.to_string() + " must have rank >= 2");
    }
    const int64_t lq = q[q.rank() - 2], d = q[q.rank() - 1];
    const int64_t lk = k[k.rank() - 2], dv = v[v.rank() - 1];
    if (k[k.rank() - 1] != d) {
      return fail("q " + q.to_string() + " and k " + k.to_string() + " differ in head dim: " + std::to_string(d) +
                  " vs " + std::to_string(k[k.rank() - 1]));
    }
    if (v[v.rank() - 2] != lk) {
      return fail("k " + k.to_string() + " and v " + v.to_string() + " differ in key count: " + std::to_string(lk) +
                  " vs " + std::to_string(v[v.rank() - 2]));
    }
    Dims batch;
    if (!broadcast_dims({batch_of(q, 2), batch_of(k, 2), batch_of(v, 2)}, batch)) {
      return fail("the batch dims of q " + q.to_string() + ", k " + k.to_string() + " and v " + v.to_string() +
                  " do not broadcast");
    }
    std::vector<int64_t> e = extents(batch);
    if (node_.inputs.size() > 3) {
      const Dims& mask = in(3);
      std::vector<int64_t> scores = e;
      scores.push_back(lq);
      scores.push_back(lk);
      Dims full;
      if (!broadcast_dims({make_dims(scores), mask}, full) || full[full.rank() - 2] != lq ||
          full[full.rank() - 1] != lk) {
        return fail("mask " + mask.to_string() + " does not broadcast to the scores " + make_dims(scores).to_string());
      }
      e = extents(batch_of(full, 2));
    }
    e.push_back(lq);
    e.push_back(dv);
    return set(make_dims(e));
  }

  Status permute() {
    const Dims& x = in(0);
    const std::vector<int64_t>& perm = node_.attrs.ints;
    if (perm.size() != static_cast<size_t>(x.rank())) {
      return fail("perm has " + std::to_string(perm.size()) + " entries but x " + x.to_string() + " has rank " +
                  std::to_string(x.rank()));
    }
    std::vector<int64_t> e(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) e[i] = x[static_cast<int32_t>(perm[i])];
    return set(make_dims(e));
  }

  Status concat() {
    const Dims& first = in(0);
    GEARBOX_RETURN_IF_ERROR(need_axis(first, "input 0"));
    std::vector<int64_t> e = extents(first);
    const auto axis = static_cast<size_t>(node_.attrs.axis);
    for (size_t i = 1; i < node_.inputs.size(); ++i) {
      const Dims& x = in(i);
      bool fits = x.rank() == first.rank();
      for (int32_t d = 0; fits && d < x.rank(); ++d) fits = static_cast<size_t>(d) == axis || x[d] == first[d];
      if (!fits) {
        return fail("input " + std::to_string(i) + " " + x.to_string() + " does not match input 0 " +
                    first.to_string() + " outside axis " + std::to_string(axis));
      }
      e[axis] += x[static_cast<int32_t>(axis)];
    }
    return set(make_dims(e));
  }

  static Dims batch_of(const Dims& d, int32_t inner) {
    return Dims(d.extents().subspan(0, static_cast<size_t>(d.rank() - inner)));
  }

  const Network& net_;
  const Node& node_;
  const std::string& label_;
  std::vector<Dims>& dims_;
};

}  // namespace

bool broadcast_dims(std::span<const Dims> shapes, Dims& out) {
  int32_t rank = 0;
  for (const Dims& s : shapes) rank = std::max(rank, s.rank());
  std::vector<int64_t> e(static_cast<size_t>(rank), 1);
  for (const Dims& s : shapes) {
    const int32_t offset = rank - s.rank();
    for (int32_t d = 0; d < s.rank(); ++d) {
      int64_t& o = e[static_cast<size_t>(offset) + static_cast<size_t>(d)];
      if (s[d] == o || s[d] == 1) continue;
      if (o != 1) return false;
      o = s[d];
    }
  }
  out = make_dims(e);
  return true;
}

std::vector<int64_t> broadcast_strides(const Dims& dims, int32_t rank) {
  std::vector<int64_t> strides(static_cast<size_t>(rank), 0);
  int64_t stride = 1;
  for (int32_t d = dims.rank() - 1; d >= 0; --d) {
    const int32_t o = rank - dims.rank() + d;
    if (o >= 0 && dims[d] != 1) strides[static_cast<size_t>(o)] = stride;
    stride *= dims[d];
  }
  return strides;
}

SliceRange slice_range(int64_t extent, int64_t start, int64_t end, int64_t step) noexcept {
  auto clamp = [extent](int64_t v) {
    if (v < 0) v = v < -extent ? 0 : v + extent;
    return std::min(v, extent);
  };
  SliceRange r;
  r.step = std::max<int64_t>(step, 1);
  r.start = clamp(start);
  const int64_t stop = clamp(end);
  r.count = stop > r.start ? (stop - r.start - 1) / r.step + 1 : 0;
  return r;
}

Result<Dims> resolve_shape_spec(std::span<const int64_t> spec, const Dims& x, bool expand) {
  const std::string what = expand ? "expand shape " : "reshape shape ";
  auto spec_string = [&] {
    std::string s = "[";
    for (size_t i = 0; i < spec.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(spec[i]);
    return s + "]";
  };
  if (spec.size() > static_cast<size_t>(kMaxDims)) {
    return invalid_argument(what + spec_string() + " has more than " + std::to_string(kMaxDims) + " dims");
  }
  const auto rank = static_cast<int32_t>(spec.size());
  if (expand && rank < x.rank()) {
    return invalid_argument(what + spec_string() + " has a lower rank than x " + x.to_string());
  }
  std::vector<int64_t> e(spec.size(), 0);
  int32_t inferred = -1;
  for (int32_t i = 0; i < rank; ++i) {
    const int64_t v = spec[static_cast<size_t>(i)];
    if (v >= 0) {
      e[static_cast<size_t>(i)] = v;
    } else if (v == -1 && expand) {
      const int32_t xd = x.rank() - rank + i;
      if (xd < 0) {
        return invalid_argument(what + spec_string() + ": -1 at dim " + std::to_string(i) + " has no dim of x " +
                                x.to_string() + " to take");
      }
      e[static_cast<size_t>(i)] = x[xd];
    } else if (v == -1) {
      inferred = i;
    } else {
      const int64_t xd = -v - 2;
      if (xd >= x.rank()) {
        return invalid_argument(what + spec_string() + ": " + std::to_string(v) + " names dim " + std::to_string(xd) +
                                " of x " + x.to_string());
      }
      e[static_cast<size_t>(i)] = x[static_cast<int32_t>(xd)];
    }
  }
  if (expand) {
    for (int32_t d = 0; d < x.rank(); ++d) {
      const int64_t xe = x[d];
      const int64_t oe = e[static_cast<size_t>(rank - x.rank()) + static_cast<size_t>(d)];
      if (xe != 1 && xe != oe) {
        return invalid_argument(what + spec_string() + " gives " + make_dims(e).to_string() + ", which x " +
                                x.to_string() + " does not expand to (dim " + std::to_string(d) + ")");
      }
    }
    return make_dims(e);
  }
  const int64_t volume = x.volume();
  if (inferred >= 0) {
    int64_t known = 1;
    for (int32_t i = 0; i < rank; ++i) known = i == inferred ? known : known * e[static_cast<size_t>(i)];
    if (known == 0 || volume % known != 0) {
      return invalid_argument(what + spec_string() + " cannot take the " + std::to_string(volume) + " elements of x " +
                              x.to_string());
    }
    e[static_cast<size_t>(inferred)] = volume / known;
  }
  const Dims out = make_dims(e);
  if (out.volume() != volume) {
    return invalid_argument(what + spec_string() + " gives " + out.to_string() + " of " + std::to_string(out.volume()) +
                            " elements, but x " + x.to_string() + " has " + std::to_string(volume));
  }
  return out;
}

Status infer_generic_node(const Network& net, size_t n, const std::string& label, std::vector<Dims>& dims) {
  return GenericInferer(net, n, label, dims).run();
}

}  // namespace gearbox::ir
