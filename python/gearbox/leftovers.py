"""Decomposes the ops the partitioner kept whole (gearbox.capability.KEEP_WHOLE) but left
on ExecuTorch, into ops ExecuTorch's portable kernels run: linear -> mm/addmm, silu ->
x * sigmoid(x), scaled_dot_product_attention -> bmm, masked_fill and softmax. Runs on
the lowered edge program (gearbox.to_edge_transform_and_lower does)."""

from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch.fx import Node

from gearbox.fx_util import add_node, bind, is_op, shape


def _edge(name: str, overload: str):
    from executorch.exir.dialects._ops import ops as exir_ops

    return getattr(getattr(exir_ops.edge.aten, name), overload)


def _sym(graph, source: Node, dim: int, like: Node):
    """A node giving source's (symbolic) extent `dim`, for view shapes (with -1 the new
    node's fake value loses the symbol and ExecuTorch plans it as static)."""
    node = graph.call_function(torch.ops.aten.sym_size.int, (source, dim))
    node.meta["val"] = source.meta["val"].shape[dim]
    return node


def _dims(graph, extents, source: Node, like: Node) -> Optional[List]:
    """extents for view_copy, each symbolic one read from the same dim of source."""
    out = []
    for d, e in enumerate(extents):
        if isinstance(e, int):
            out.append(e)
        elif d < len(shape(source)) and str(shape(source)[d]) == str(e):
            out.append(_sym(graph, source, d, like))
        else:
            return None
    return out


def _linear(graph, node: Node):
    b = bind(node)
    x, w, bias = b["input"], b["weight"], b.get("bias")
    xs, ws = shape(x), shape(w)
    lead = _dims(graph, list(xs[:-1]) + [ws[0]], x, node)
    rows = [e for e in xs[:-1] if not (isinstance(e, int) and e == 1)]
    if lead is None or len(rows) > 1:
        return None
    flat_rows = rows[0] if rows and isinstance(rows[0], int) else (_sym(graph, x, list(xs).index(rows[0]), node)
                                                                   if rows else 1)
    x2 = add_node(graph, _edge("view_copy", "default"), (x, [flat_rows, xs[-1]]), like=node)
    wt = add_node(graph, _edge("permute_copy", "default"), (w, [1, 0]), like=node)
    y = (add_node(graph, _edge("addmm", "default"), (bias, x2, wt), like=node) if bias is not None
         else add_node(graph, _edge("mm", "default"), (x2, wt), like=node))
    return add_node(graph, _edge("view_copy", "default"), (y, lead), like=node)


def _silu(graph, node: Node):
    x = node.args[0]
    s = add_node(graph, _edge("sigmoid", "default"), (x,), like=node)
    return add_node(graph, _edge("mul", "Tensor"), (x, s), like=node)


def _sdpa(graph, node: Node):
    b = bind(node)
    q, k, v, mask = b["query"], b["key"], b["value"], b.get("attn_mask")
    if b.get("is_causal") or b.get("dropout_p", 0.0) or b.get("enable_gqa"):
        return None
    qs, ks = shape(q), shape(k)
    if len(qs) != 4 or shape(v) != ks or not all(isinstance(e, int) for e in (qs[0], qs[1], qs[3])):
        return None
    batch_heads, d, rows = qs[0] * qs[1], qs[3], ks[2]
    if not isinstance(rows, int):
        return None  # a key length that is a symbol: two dynamic extents in one view
    scale = b.get("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    view = _edge("view_copy", "default")
    t = qs[2] if isinstance(qs[2], int) else _sym(graph, q, 2, node)
    q3 = add_node(graph, view, (q, [batch_heads, t, d]), like=node)
    kt = add_node(graph, _edge("permute_copy", "default"), (k, [0, 1, 3, 2]), like=node)
    kt3 = add_node(graph, view, (kt, [batch_heads, d, rows]), like=node)
    s = add_node(graph, _edge("bmm", "default"), (q3, kt3), like=node)
    s = add_node(graph, _edge("mul", "Scalar"), (s, scale), like=node)
    s = add_node(graph, view, (s, [qs[0], qs[1], t, rows]), like=node)
    if mask is not None:
        if mask.meta["val"].dtype == torch.bool:
            blocked = add_node(graph, _edge("logical_not", "default"), (mask,), like=node)
            s = add_node(graph, _edge("masked_fill", "Scalar"), (s, blocked, float("-inf")), like=node)
        else:
            s = add_node(graph, _edge("add", "Tensor"), (s, mask), like=node)
    p = add_node(graph, _edge("_softmax", "default"), (s, -1, False), like=node)
    p3 = add_node(graph, view, (p, [batch_heads, t, rows]), like=node)
    v3 = add_node(graph, view, (v, [batch_heads, rows, d]), like=node)
    o = add_node(graph, _edge("bmm", "default"), (p3, v3), like=node)
    return add_node(graph, view, (o, [qs[0], qs[1], t, d]), like=node)


_DECOMPOSE = {"aten.linear.default": _linear, "aten.silu.default": _silu,
              "aten.scaled_dot_product_attention.default": _sdpa}


def decompose_leftovers(program) -> List[str]:
    """Rewrites every kept-whole op left in `program`'s graph; returns the names of those
    it could not (they keep no portable kernel)."""
    graph = program.graph_module.graph
    stuck = []
    for node in list(graph.nodes):
        for key, fn in _DECOMPOSE.items():
            if is_op(node, key):
                with graph.inserting_before(node):
                    new = fn(graph, node)
                if new is None:
                    stuck.append(f"{node.name} ({key})")
                else:
                    node.replace_all_uses_with(new)
                    graph.erase_node(node)
    graph.eliminate_dead_code()
    program.graph_module.recompile()
    return stuck
