"""Generic converters of layout ops (reshape, permute, slice, concat, split, expand,
casts), gathers (index_select, gather, embedding) and constants made in the graph (see
gearbox.converters_generic)."""

from __future__ import annotations

import math
import operator
from typing import List, Optional, Tuple

import torch
from torch.fx import Node

from gearbox.converters import SIZE
from gearbox.converters_generic import (INT64_MAX, _CASTS, _INTS, _OPEN_END, _axis, _first, _key, _out, _tensor,
                                        register, shape_spec)
from gearbox.fx_util import bind, same_extent, tensor_val


# ---- layout ------------------------------------------------------------------------------------

_RESHAPES = ("aten.view_copy.default", "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
             "aten.squeeze_copy.dim", "aten.squeeze_copy.dims", "aten.squeeze_copy.default", "aten.squeeze.dim",
             "aten.squeeze.dims", "aten.squeeze.default", "aten.unsqueeze_copy.default", "aten.unsqueeze.default",
             "aten.flatten.using_ints")


def _validate_reshape(node, state):
    x = node.args[0]
    r = _first(_tensor(x, "the input"), _out(node))
    if r:
        return r
    return shape_spec(tensor_val(x).shape, tensor_val(node).shape)[1]


@register(*_RESHAPES, validate=_validate_reshape)
def _emit_reshape(node, nb):
    x = node.args[0]
    spec, _ = shape_spec(tensor_val(x).shape, tensor_val(node).shape)
    nb.add("reshape", node, [nb.operand(x, "the input")], attrs={"shape": spec})


def _perm(node) -> List[int]:
    key, rank = _key(node), tensor_val(node.args[0]).dim()
    if key in ("aten.permute_copy.default", "aten.permute.default"):
        return [_axis(d, rank) for d in node.args[1]]
    perm = list(range(rank))
    if key in ("aten.t_copy.default", "aten.t.default"):
        return perm[::-1]
    i, j = _axis(node.args[1], rank), _axis(node.args[2], rank)
    perm[i], perm[j] = perm[j], perm[i]
    return perm


def _validate_permute(node, state):
    return _first(_tensor(node.args[0], "the input"), _out(node))


@register("aten.permute_copy.default", "aten.permute.default", "aten.transpose.int", "aten.transpose_copy.int",
          "aten.t_copy.default", "aten.t.default", validate=_validate_permute)
def _emit_permute(node, nb):
    nb.add("permute", node, [nb.operand(node.args[0], "the input")], attrs={"perm": _perm(node)})


def _validate_identity(node, state):
    return _first(_tensor(node.args[0], "the input"), _out(node))


@register("aten.clone.default", "aten.alias_copy.default", "aten.alias.default", "aten.contiguous.default",
          "aten.detach_copy.default", "aten.detach.default", "dim_order_ops._clone_dim_order.default",
          validate=_validate_identity)
def _emit_identity(node, nb):
    nb.names[node] = nb.operand(node.args[0], "the input")


def _validate_cast(node, state):
    return _first(_tensor(node.args[0], "the input"), _out(node))


@register(*_CASTS, validate=_validate_cast)
def _emit_cast(node, nb):
    x = nb.operand(node.args[0], "the input")
    if tensor_val(node).dtype == nb.dtype_of(x):
        nb.names[node] = x
    else:
        nb.add("cast", node, [x])


def _slice_bounds(node) -> Tuple[Optional[Tuple[int, int, int, int]], Optional[str]]:
    """(axis, start, end, step) of a slice node, or (None, why)."""
    b = bind(node)
    x = b["self"]
    rank = tensor_val(x).dim()
    axis = _axis(b.get("dim", 0), rank)
    extent = tensor_val(x).shape[axis]
    start, end, step = b.get("start"), b.get("end"), b.get("step", 1)
    start = 0 if start is None else start
    if isinstance(start, Node) or not isinstance(start, int):
        return None, "a slice with a dynamic start"
    if end is None:
        end = INT64_MAX
    elif isinstance(end, Node):
        if not same_extent(end.meta.get("val"), extent):
            return None, f"a slice end {end.meta.get('val')} that is not the input extent {extent}"
        end = INT64_MAX
    elif not isinstance(end, int):
        return None, "a slice end that is not a number"
    elif end >= _OPEN_END:
        end = INT64_MAX
    if not isinstance(step, int) or step < 1:
        return None, "a slice step below 1"
    return (axis, start, end, step), None


def _slice_attrs(axis: int, start: int, end: int, step: int) -> dict:
    """The slice node's attrs; an open end is left out."""
    attrs = {"axis": axis, "start": start, "end": end, "step": step}
    if end == INT64_MAX:
        del attrs["end"]
    return attrs


def _validate_slice(node, state):
    r = _first(_tensor(bind(node)["self"], "the input"), _out(node))
    return r or _slice_bounds(node)[1]


@register("aten.slice_copy.Tensor", "aten.slice.Tensor", validate=_validate_slice)
def _emit_slice(node, nb):
    (axis, start, end, step), _ = _slice_bounds(node)
    nb.add("slice", node, [nb.operand(bind(node)["self"], "the input")], attrs=_slice_attrs(axis, start, end, step))


def _validate_select(node, state):
    b = bind(node)
    r = _first(_tensor(b["self"], "the input"), _out(node))
    if r:
        return r
    if not isinstance(b["index"], int):
        return "a select at a dynamic index"
    return None


@register("aten.select_copy.int", "aten.select.int", validate=_validate_select)
def _emit_select(node, nb):
    b = bind(node)
    xs = tensor_val(b["self"]).shape
    axis, i = _axis(b["dim"], len(xs)), b["index"]
    if i < 0 and isinstance(xs[axis], int):
        i += xs[axis]
    end = i + 1 if i + 1 != 0 else INT64_MAX
    s = nb.emit("slice", f"{node.name}.slice", [nb.operand(b["self"], "the input")], tensor_val(node).dtype,
                attrs=_slice_attrs(axis, i, end, 1))
    nb.add("reshape", node, [s], attrs={"shape": [-(j + 2) for j in range(len(xs)) if j != axis]})


def _validate_cat(node, state):
    b = bind(node)
    tensors = b["tensors"]
    for i, t in enumerate(tensors):
        r = _tensor(t, f"tensor {i}")
        if r:
            return r
        if tensor_val(t).dim() != tensor_val(node).dim():
            return f"tensor {i} has rank {tensor_val(t).dim()} (cat of an empty 1-D tensor)"
    return _out(node)


@register("aten.cat.default", "aten.concat.default", validate=_validate_cat)
def _emit_cat(node, nb):
    b = bind(node)
    out = tensor_val(node).dtype
    ins = [nb.cast(nb.operand(t, "a tensor"), out) for t in b["tensors"]]
    nb.add("concat", node, ins, attrs={"axis": _axis(b.get("dim", 0), tensor_val(node).dim())})


_SPLITS = ("aten.split_with_sizes_copy.default", "aten.split_with_sizes.default", "aten.split_copy.Tensor",
           "aten.split.Tensor", "aten.chunk.default", "aten.unsafe_split.Tensor")


def _split_ranges(node) -> Tuple[Optional[List[Tuple[int, int]]], Optional[str]]:
    """(start, end) per output of a split along its dim; the last end may be open."""
    parts = node.meta.get("val")
    x = tensor_val(node.args[0])
    if not isinstance(parts, (list, tuple)) or x is None:
        return None, "the split's outputs are unknown"
    axis = _axis(bind(node).get("dim", 0), x.dim())
    ranges, start = [], 0
    for i, p in enumerate(parts):
        e = p.shape[axis]
        if isinstance(e, int):
            ranges.append((start, start + e))
            start += e
        elif i == len(parts) - 1 and isinstance(start, int):
            ranges.append((start, INT64_MAX))
        else:
            return None, "a split into dynamic pieces other than the last"
    return ranges, None


def _validate_split(node, state):
    r = _tensor(node.args[0], "the input")
    if r:
        return r
    for u in node.users:
        if u.target is not operator.getitem:
            return "a split whose pieces are used as a list"
    return _split_ranges(node)[1]


@register(*_SPLITS, validate=_validate_split)
def _emit_split(node, nb):
    x = nb.operand(node.args[0], "the input")
    axis = _axis(bind(node).get("dim", 0), tensor_val(node.args[0]).dim())
    ranges, _ = _split_ranges(node)
    for u in node.users:
        start, end = ranges[u.args[1]]
        nb.add("slice", u, [x], attrs=_slice_attrs(axis, start, end, 1))


def _validate_expand(node, state):
    x = node.args[0]
    r = _first(_tensor(x, "the input"), _out(node))
    return r or shape_spec(tensor_val(x).shape, tensor_val(node).shape, expand=True)[1]


@register("aten.expand_copy.default", "aten.expand.default", validate=_validate_expand)
def _emit_expand(node, nb):
    x = node.args[0]
    spec, _ = shape_spec(tensor_val(x).shape, tensor_val(node).shape, expand=True)
    nb.add("expand", node, [nb.operand(x, "the input")], attrs={"shape": spec})


# ---- gathers and constants ---------------------------------------------------------------------


def _validate_index_select(node, state):
    b = bind(node)
    r = _first(_tensor(b["self"], "the input"), _tensor(b["index"], "the index", _INTS), _out(node))
    if r:
        return r
    return None if tensor_val(b["index"]).dim() == 1 else "an index that is not 1-D"


@register("aten.index_select.default", validate=_validate_index_select)
def _emit_index_select(node, nb):
    b = bind(node)
    nb.add("index_select", node, [nb.operand(b["self"], "the input"), nb.operand(b["index"], "the index")],
           attrs={"axis": _axis(b["dim"], tensor_val(b["self"]).dim())})


def _validate_gather(node, state):
    b = bind(node)
    r = _first(_tensor(b["self"], "the input"), _tensor(b["index"], "the index", _INTS), _out(node))
    if r:
        return r
    return None if tensor_val(b["index"]).dim() == tensor_val(b["self"]).dim() else "an index of another rank"


@register("aten.gather.default", validate=_validate_gather)
def _emit_gather(node, nb):
    b = bind(node)
    nb.add("gather", node, [nb.operand(b["self"], "the input"), nb.operand(b["index"], "the index")],
           attrs={"axis": _axis(b["dim"], tensor_val(b["self"]).dim())})


def _validate_embedding(node, state):
    b = bind(node)
    r = _first(_tensor(b["weight"], "the table"), _tensor(b["indices"], "the ids", _INTS), _out(node))
    if r:
        return r
    ids = tensor_val(b["indices"])
    if tensor_val(b["weight"]).dim() != 2:
        return "a table that is not 2-D"
    if ids.dim() > 1:
        flat = [math.prod(ids.shape), tensor_val(b["weight"]).shape[1]]
        return shape_spec(flat, tensor_val(node).shape)[1]
    return None


@register("aten.embedding.default", validate=_validate_embedding)
def _emit_embedding(node, nb):
    b = bind(node)
    table, ids = nb.operand(b["weight"], "the table"), nb.operand(b["indices"], "the ids")
    shape = tensor_val(b["indices"]).shape
    if len(shape) == 1:
        nb.add("index_select", node, [table, ids], attrs={"axis": 0})
        return
    flat_ids = nb.emit("reshape", f"{node.name}.ids", [ids], nb.dtype_of(ids), attrs={"shape": [-1]})
    rows = nb.emit("index_select", f"{node.name}.rows", [table, flat_ids], tensor_val(node).dtype, attrs={"axis": 0})
    spec, _ = shape_spec([math.prod(shape), tensor_val(b["weight"]).shape[1]], tensor_val(node).shape)
    nb.add("reshape", node, [rows], attrs={"shape": spec})


_FULL = ("aten.full.default", "aten.zeros.default", "aten.ones.default", "aten.scalar_tensor.default",
         "aten.arange.default", "aten.arange.start", "aten.arange.start_step")


_SIZED_FULL = ("aten.full.default", "aten.zeros.default", "aten.ones.default")
_EXTENT_DTYPES = (torch.float32, torch.int32, torch.int64)  # what an extent's source may hold


def _extent_sources(node) -> Tuple[Optional[List[Optional[Tuple[Node, int]]]], Optional[str]]:
    """For each extent of a full/zeros/ones of dynamic shape: None where it is a number, else
    (tensor, dim) of the aten.sym_size.int it reads; or (None, why)."""
    if _key(node) not in _SIZED_FULL:
        return None, "a range of dynamic length (no IR op counts up to an extent)"
    size, out = node.args[0], tensor_val(node).shape
    if not isinstance(size, (list, tuple)) or len(size) != len(out):
        return None, "a tensor made from dynamic sizes it does not list"
    sources: List[Optional[Tuple[Node, int]]] = []
    for e, want in zip(size, out):
        if isinstance(e, int):
            sources.append(None)
            continue
        if not isinstance(e, Node) or _key(e) != "aten.sym_size.int" or not same_extent(e.meta.get("val"), want):
            return None, f"a tensor of extent {want} that is no tensor's extent"
        x, dim = e.args[0], e.args[1]
        r = _tensor(x, "the tensor holding the extent", _EXTENT_DTYPES)
        if r:
            return None, r
        sources.append((x, _axis(dim, tensor_val(x).dim())))
    return sources, None


def _validate_full(node, state):
    v = tensor_val(node)
    if v is None:
        return _out(node)
    if not all(isinstance(e, int) for e in v.shape):
        if any(isinstance(a, Node) for a in node.args[1:]) or any(isinstance(a, Node) for a in node.kwargs.values()):
            return "a tensor made from a value computed in the graph"
        return _first(_extent_sources(node)[1], _out(node))
    nodes = []
    torch.fx.node.map_arg((node.args, node.kwargs), nodes.append)
    if nodes:
        return "a tensor made from dynamic sizes or tensors"
    return _out(node)


@register(*_FULL, validate=_validate_full)
def _emit_full(node, nb):
    if not all(isinstance(e, int) for e in tensor_val(node).shape):
        _emit_dynamic_full(node, nb)
        return
    kwargs = {k: v for k, v in node.kwargs.items() if k in ("dtype",)}
    op = getattr(node.target, "_op", node.target)
    value = op(*node.args, **kwargs)
    if value.dim() == 0:  # weights have rank 1 to 8: a [1] constant reshaped to []
        nb.add("reshape", node, [nb.constant(value.reshape(1), f"{node.name}.value")], attrs={"shape": []})
        return
    key = nb.fresh(f"{node.name}.value")
    nb.weights[key] = value.contiguous()
    nb.add("constant", node, [], weights=[key])


def _emit_dynamic_full(node, nb):
    """A full/zeros/ones with dynamic extents: where(cond, c, c) of a constant c holding the
    static extents (1 at the dynamic ones), broadcast by a bool cond whose dynamic extents
    come from the tensors the sizes were read from (x == x over one row of each). Both
    branches are c, so cond's values (false for NaN) do not matter, only its shape."""
    sources, _ = _extent_sources(node)
    v = tensor_val(node)
    rank = v.dim()
    cond = None
    for i, source in enumerate(sources):
        if source is None:
            continue
        x, dim = source
        xv = tensor_val(x)
        row = nb.operand(x, "the tensor holding the extent")
        for axis in range(xv.dim()):  # one element along every other axis
            if axis != dim and xv.shape[axis] != 1:
                row = nb.emit("slice", f"{node.name}.extent{i}", [row], xv.dtype, attrs=_slice_attrs(axis, 0, 1, 1))
        spec = [1] * rank
        spec[i] = -(dim + 2)
        row = nb.emit("reshape", f"{node.name}.extent{i}", [row], xv.dtype, attrs={"shape": spec})
        c = nb.emit("binary", f"{node.name}.extent{i}", [row, row], torch.bool, attrs={"code": "eq"})
        cond = c if cond is None else nb.emit("binary", f"{node.name}.extents", [cond, c], torch.bool,
                                              attrs={"code": "logical_and"})
    kwargs = {k: a for k, a in node.kwargs.items() if k in ("dtype",)}
    static = [e if isinstance(e, int) else 1 for e in node.args[0]]
    op = getattr(node.target, "_op", node.target)
    value = op(static, *node.args[1:], **kwargs)
    c = nb.constant(value, f"{node.name}.value")
    nb.add("where", node, [cond, c, c])


# Shape queries and metadata checks: no value of their own in the network.
register("aten.sym_size.int", "aten._assert_tensor_metadata.default", kind=SIZE)(None)
