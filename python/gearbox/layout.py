"""Layouts of attention activations, so that patterns see through head reshapes.

gearbox's IR keeps activations as [B, T, F] rows. A transformer splits F into heads with
views and transposes ([1, T, H*D] -> [1, T, H, D] -> [1, H, T, D]) around RoPE, the KV
cache and attention. `form_of` tells which IR tensor a value is a layout of; `rebuild`
makes that layout again from a new IR tensor, for the consumers a rewrite leaves in place.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch.fx import Node

from gearbox.fx_util import add_node, is_op, same_extent, shape, tensor_val

FLAT, HEADS, HEADS_T = "flat", "heads", "heads_t"  # [1, T, H*D], [1, T, H, D], [1, H, T, D]

_IDENTITY = ("aten.clone.default", "aten.alias_copy.default", "aten.alias.default",
             "dim_order_ops._clone_dim_order.default", "aten.contiguous.default")
_CASTS = ("aten._to_copy.default", "dim_order_ops._to_dim_order_copy.default")
_VIEWS = ("aten.view_copy.default", "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")
_PERMUTES = ("aten.permute_copy.default", "aten.permute.default")
_TRANSPOSES = ("aten.transpose.int", "aten.transpose_copy.int")
LAYOUT_OPS = _IDENTITY + _VIEWS + _PERMUTES + _TRANSPOSES


@dataclasses.dataclass(frozen=True)
class Form:
    """`node` is `kind` of the IR tensor `src` ([1, T, heads*head_dim])."""

    src: Node
    kind: str
    heads: int = 0
    head_dim: int = 0


def strip_identity(node):
    """Looks through clones, aliases and float32 -> float32 casts."""
    while isinstance(node, Node):
        if is_op(node, *_IDENTITY):
            node = node.args[0]
        elif is_op(node, *_CASTS) and _same_dtype(node, node.args[0]):
            node = node.args[0]
        else:
            break
    return node


def _same_dtype(a, b) -> bool:
    va, vb = tensor_val(a), tensor_val(b)
    return va is not None and vb is not None and va.dtype == vb.dtype


def _is_row_major_activation(node) -> bool:
    s = shape(node)
    v = tensor_val(node)
    return s is not None and len(s) == 3 and same_extent(s[0], 1) and v.dtype.is_floating_point


def _swaps_1_2(node) -> bool:
    if is_op(node, *_PERMUTES):
        return list(node.args[1]) == [0, 2, 1, 3]
    if is_op(node, *_TRANSPOSES):
        dims = sorted(d % 4 for d in node.args[1:3])
        return dims == [1, 2]
    return False


def form_of(node) -> Optional[Form]:
    """The layout `node` is of an IR activation, or None when it is none of FLAT, HEADS
    and HEADS_T of a [1, T, F] tensor."""
    node = strip_identity(node)
    if not isinstance(node, Node):
        return None
    s = shape(node)
    if s is None:
        return None
    if is_op(node, *_VIEWS):
        inner = form_of(node.args[0])
        if inner is None:
            return None
        src_shape = shape(inner.src)
        if len(s) == 3 and same_extent(s[1], src_shape[1]) and same_extent(s[2], src_shape[2]) \
                and inner.kind in (FLAT, HEADS):
            return Form(inner.src, FLAT)
        if len(s) == 4 and inner.kind in (FLAT, HEADS) and isinstance(s[2], int) and isinstance(s[3], int) \
                and same_extent(s[1], src_shape[1]) and s[2] * s[3] == src_shape[2]:
            return Form(inner.src, HEADS, s[2], s[3])
        if len(s) == 4 and inner.kind == HEADS_T and same_shape_node(node, node.args[0]):
            return inner
        return None
    if _swaps_1_2(node):
        inner = form_of(node.args[0])
        if inner is None or inner.kind == FLAT:
            return None
        return dataclasses.replace(inner, kind=HEADS_T if inner.kind == HEADS else HEADS)
    if _is_row_major_activation(node):
        return Form(node, FLAT)
    return None


def same_shape_node(a, b) -> bool:
    sa, sb = shape(a), shape(b)
    return sa is not None and sb is not None and len(sa) == len(sb) and all(
        same_extent(x, y) for x, y in zip(sa, sb))


def flat_source(node) -> Optional[Node]:
    """The IR tensor `node` equals (same shape, same values), or None."""
    f = form_of(node)
    return f.src if f is not None and f.kind == FLAT else None


def rebuild(graph: torch.fx.Graph, src: Node, form: Form, like: Node) -> Node:
    """form's layout of the IR tensor src, built with new view/permute nodes."""
    from executorch.exir.dialects._ops import ops as exir_ops

    if form.kind == FLAT:
        return src
    t = src.meta["val"].shape[1]
    view = add_node(graph, exir_ops.edge.aten.view_copy.default, (src, [1, -1, form.heads, form.head_dim]), like=like,
                    fake_args=(src, [1, t, form.heads, form.head_dim]))
    if form.kind == HEADS:
        return view
    return add_node(graph, exir_ops.edge.aten.permute_copy.default, (view, [0, 2, 1, 3]), like=like)


def is_layout(node) -> bool:
    return is_op(node, *LAYOUT_OPS) or (is_op(node, *_CASTS) and _same_dtype(node, node.args[0]))


__all__ = ["FLAT", "HEADS", "HEADS_T", "Form", "form_of", "flat_source", "rebuild", "strip_identity", "is_layout"]
