"""Generic converters of the network ops: matmul (mm, bmm, matmul, addmm), linear when
the fast path refuses it, scaled-dot-product attention and layer norm (see
gearbox.converters_generic)."""

from __future__ import annotations

import math
import operator
from typing import Optional

import torch
from torch.fx import Node

from gearbox.converters import NetworkBuilder
from gearbox.converters_generic import _F32, _first, _key, _out, _tensor, register
from gearbox.fx_util import bind, same_extent, tensor_val


# ---- matmul, linear, attention, layer norm -----------------------------------------------------


def _validate_matmul(node, state):
    b = bind(node)
    a, m = b.get("self", b.get("input")), b.get("mat2", b.get("other"))
    r = _first(_tensor(a, "the left operand", _F32), _tensor(m, "the right operand", _F32), _out(node, _F32))
    if r:
        return r
    if min(tensor_val(a).dim(), tensor_val(m).dim()) < 1:
        return "a matmul of a 0-d tensor"
    return None


def _matmul(nb: NetworkBuilder, node_name: str, a: str, a_rank: int, b: str, b_rank: int, out: Optional[str]):
    """a @ b with torch.matmul's rank-1 rules, through reshapes; returns the result name."""
    if a_rank == 1:
        a = nb.emit("reshape", f"{node_name}.row", [a], attrs={"shape": [1, -2]})
    if b_rank == 1:
        b = nb.emit("reshape", f"{node_name}.col", [b], attrs={"shape": [-2, 1]})
    rank = max(a_rank, b_rank, 2)
    if a_rank > 1 and b_rank > 1:
        return nb.emit("matmul", node_name, [a, b], out=out)
    y = nb.emit("matmul", f"{node_name}.mm", [a, b])
    drop = {rank - 2} if a_rank == 1 else set()
    drop |= {rank - 1} if b_rank == 1 else set()
    return nb.emit("reshape", node_name, [y], attrs={"shape": [-(j + 2) for j in range(rank) if j not in drop]},
                   out=out)


@register("aten.mm.default", "aten.bmm.default", "aten.matmul.default", validate=_validate_matmul)
def _emit_matmul(node, nb):
    b = bind(node)
    a, m = b.get("self", b.get("input")), b.get("mat2", b.get("other"))
    _matmul(nb, node.name, nb.operand(a, "the left operand"), tensor_val(a).dim(), nb.operand(m, "the right operand"),
            tensor_val(m).dim(), node.name)
    nb.names[node] = node.name
    nb.dtypes[node.name] = torch.float32


def _validate_addmm(node, state):
    b = bind(node)
    if b.get("beta", 1) != 1 or b.get("alpha", 1) != 1:
        return "addmm with alpha or beta"
    return _first(_tensor(b["self"], "the bias", _F32), _validate_matmul(node, state))


@register("aten.addmm.default", validate=_validate_addmm)
def _emit_addmm(node, nb):
    b = bind(node)
    y = nb.emit("matmul", f"{node.name}.mm", [nb.operand(b["mat1"], "mat1"), nb.operand(b["mat2"], "mat2")])
    nb.add("binary", node, [y, nb.operand(b["self"], "the bias")], attrs={"code": "add"})


def _validate_linear(node, state):
    b = bind(node)
    return _first(_tensor(b["input"], "the input", _F32), _tensor(b["weight"], "the weight", _F32),
                  b.get("bias") is not None and _tensor(b["bias"], "the bias", _F32), _out(node, _F32),
                  tensor_val(b["weight"]) is not None and tensor_val(b["weight"]).dim() != 2 and "a weight not 2-D")


@register("aten.linear.default", validate=_validate_linear)
def _emit_linear(node, nb):
    b = bind(node)
    wt = nb.emit("permute", f"{node.name}.wt", [nb.operand(b["weight"], "the weight")], attrs={"perm": [1, 0]})
    bias = b.get("bias")
    y = _matmul(nb, node.name if bias is None else f"{node.name}.mm", nb.operand(b["input"], "the input"),
                tensor_val(b["input"]).dim(), wt, 2, node.name if bias is None else None)
    if bias is not None:
        nb.add("binary", node, [y, nb.operand(bias, "the bias")], attrs={"code": "add"})
    else:
        nb.names[node] = node.name
        nb.dtypes[node.name] = torch.float32


_SDPA = ("aten.scaled_dot_product_attention.default",)


def _validate_sdpa(node, state):
    b = bind(node)
    q, k, v, mask = b["query"], b["key"], b["value"], b.get("attn_mask")
    r = _first(_tensor(q, "the query", _F32), _tensor(k, "the key", _F32), _tensor(v, "the value", _F32),
               mask is not None and _tensor(mask, "the mask", (torch.float32, torch.bool)), _out(node, _F32))
    if r:
        return r
    if b.get("dropout_p", 0.0):
        return "attention with dropout"
    if mask is not None and b.get("is_causal"):
        return "a mask and is_causal together"
    qs, ks = tensor_val(q).shape, tensor_val(k).shape
    if min(len(qs), len(ks), tensor_val(v).dim()) < 2:
        return "q, k or v of rank below 2"
    if b.get("scale") is None and not isinstance(qs[-1], int):
        return "a dynamic head dim without a scale"
    if b.get("enable_gqa") and len(qs) >= 3 and not same_extent(qs[-3], ks[-3]):
        if len(qs) != 4 or len(ks) != 4 or not all(isinstance(e, int) for e in (qs[1], ks[1])) or qs[1] % ks[1]:
            return "grouped-query attention other than [B, H, L, D] with H a multiple of the kv heads"
    return None


def _repeat_heads(nb: NetworkBuilder, name: str, x: str, heads: int, kv_heads: int, what: str) -> str:
    """[B, Hk, L, D] -> [B, Hk * g, L, D], kv head h serving query heads h*g .. h*g+g-1."""
    g = heads // kv_heads
    x5 = nb.emit("reshape", f"{name}.{what}5", [x], attrs={"shape": [-2, -3, 1, -4, -5]})
    x5 = nb.emit("expand", f"{name}.{what}x", [x5], attrs={"shape": [-1, -1, g, -1, -1]})
    return nb.emit("reshape", f"{name}.{what}", [x5], attrs={"shape": [-2, heads, -5, -6]})


@register(*_SDPA, validate=_validate_sdpa)
def _emit_sdpa(node, nb):
    b = bind(node)
    q, k, v, mask = b["query"], b["key"], b["value"], b.get("attn_mask")
    qs, ks = tensor_val(q).shape, tensor_val(k).shape
    names = [nb.operand(q, "the query"), nb.operand(k, "the key"), nb.operand(v, "the value")]
    if b.get("enable_gqa") and len(qs) == 4 and not same_extent(qs[1], ks[1]):
        names[1] = _repeat_heads(nb, node.name, names[1], int(qs[1]), int(ks[1]), "k")
        names[2] = _repeat_heads(nb, node.name, names[2], int(qs[1]), int(ks[1]), "v")
    if mask is not None:
        names.append(nb.operand(mask, "the mask"))
    scale = b.get("scale")
    attrs = {"scale": float(scale) if scale is not None else 1.0 / math.sqrt(int(qs[-1])),
             "causal": bool(b.get("is_causal", False))}
    nb.add("sdpa", node, names, attrs=attrs)


def _validate_layer_norm(node, state):
    b = bind(node)
    x, shape_, w, bias = b["input"], b["normalized_shape"], b.get("weight"), b.get("bias")
    r = _tensor(x, "the input", _F32)
    if r:
        return r
    if len(shape_) != 1 or not same_extent(shape_[0], tensor_val(x).shape[-1]):
        return f"a layer norm over {list(shape_)}, not the last dim alone"
    for t, what in ((w, "the weight"), (bias, "the bias")):
        if t is not None and (not state.is_param(t) or tensor_val(t).dim() != 1):
            return f"{what} is not a 1-D parameter of the model"
    if _key(node) == "aten.native_layer_norm.default":
        for u in node.users:
            if u.target is not operator.getitem or u.args[1] != 0:
                return "the mean or rstd output of native_layer_norm is used"
        return None
    return _out(node, _F32)


@register("aten.native_layer_norm.default", "aten.layer_norm.default", validate=_validate_layer_norm)
def _emit_layer_norm(node, nb):
    b = bind(node)
    w, bias = b.get("weight"), b.get("bias")
    features = int(tensor_val(b["input"]).shape[-1])
    weights = []
    if w is not None or bias is not None:
        weights.append(_f32_weight(nb, w) if w is not None else _new_weight(nb, f"{node.name}.ones",
                                                                           torch.ones(features)))
    if bias is not None:
        weights.append(_f32_weight(nb, bias))
    attrs = {"eps": float(b.get("eps", 1e-5))}
    if bias is not None:
        attrs["has_bias"] = 1
    out = node.name
    nb.emit("layer_norm", out, [nb.operand(b["input"], "the input")], weights=weights, attrs=attrs, out=out)
    nb.dtypes[out] = torch.float32
    if _key(node) == "aten.native_layer_norm.default":
        for u in node.users:
            nb.names[u] = out
    else:
        nb.names[node] = out


def _f32_weight(nb: NetworkBuilder, node: Node) -> str:
    name = nb.weight(node)
    if nb.weights[name].dtype != torch.float32:
        return _new_weight(nb, f"{name}.f32", nb.weights[name].float())
    return name


def _new_weight(nb: NetworkBuilder, base: str, value: torch.Tensor) -> str:
    name = nb.fresh(base)
    nb.weights[name] = value
    return name
