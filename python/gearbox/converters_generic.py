"""Converters for the generic IR ops (docs/FORMAT.md "Generic ops"): elementwise math with
broadcasting, comparisons and `where`, reductions, softmax, matmul, scaled-dot-product
attention, layer norm, layout ops, casts, gathers and constants.

They are registered after the fast converters of gearbox.converters, so a node that a
pattern, linear, the residual add, the last-position slice or a view round trip takes never
reaches them. Float math in gearbox is f32: a validator refuses a bf16/f16 (or f64)
activation of a float op, and casts between dtypes become `cast` nodes.

Shapes stay symbolic: a reshape or expand writes each output extent as a number, as "the
input's extent at dim d" (-(d + 2)) or, once, as inferred (-1); a view whose dynamic
extents cannot be written so is refused with the shapes in the reason.
"""

from __future__ import annotations

import math
import operator
from typing import List, Optional, Sequence, Tuple

import torch
from torch.fx import Node

from gearbox.converters import IR, SIZE, TORCH_TO_DTYPE, NetworkBuilder
from gearbox.converters import register as _register
from gearbox.fx_util import ProgramState, bind, same_extent, tensor_val

INT64_MAX = 2 ** 63 - 1
_OPEN_END = 2 ** 62  # torch.export writes an open slice end as INT64_MAX
MAX_RANK = 8
_INTS = (torch.int32, torch.int64)
_DTYPES = tuple(TORCH_TO_DTYPE)


def _index_arithmetic(node: Node, state: ProgramState) -> Optional[str]:
    """Integer/bool arithmetic on positions and cache indices (no float tensor in its
    inputs or upstream of them, no float tensor out, or a cast of such a value) stays on
    ExecuTorch with the KV cache bookkeeping it serves. Masks computed from float values
    and tensors made from constants alone are not index arithmetic."""
    ins = [tensor_val(a) for a in node.all_input_nodes]
    if not any(v is not None for v in ins) or _float_upstream(node, state):
        return None
    vals = node.meta.get("val")
    outs = vals if isinstance(vals, (list, tuple)) else [vals]
    if any(isinstance(v, torch.Tensor) and v.dtype.is_floating_point for v in outs) and _key(node) not in _CASTS:
        return None
    return "integer/bool index arithmetic, left on ExecuTorch with the bookkeeping it serves"


def _float_upstream(node: Node, state: ProgramState) -> bool:
    """A float tensor among node's inputs, or upstream of them through computed values."""
    memo = state.__dict__.setdefault("_float_upstream", {})
    stack, order = [node], []
    while stack:  # iterative: long chains of index ops would overflow recursion
        n = stack.pop()
        if n in memo:
            continue
        pending = [a for a in n.all_input_nodes if a not in memo and a.op == "call_function"]
        if pending:
            stack.append(n)
            stack.extend(pending)
            order.append(n)
            continue
        memo[n] = any((tensor_val(a) is not None and tensor_val(a).dtype.is_floating_point) or
                      (a.op == "call_function" and memo.get(a, False)) for a in n.all_input_nodes)
        if len(order) > 100000:
            break
    return memo.get(node, False)


def register(*ops: str, kind: str = IR, validate=None):
    """gearbox.converters.register for generic converters: integer/bool index arithmetic is
    refused before the op's own validator runs."""
    if kind != IR:
        return _register(*ops, kind=kind, validate=validate)
    own = validate or (lambda n, s: None)
    return _register(*ops, kind=kind, validate=lambda n, s: _index_arithmetic(n, s) or own(n, s))


# ---- shapes ----------------------------------------------------------------------------------


def _is_symbol(e) -> bool:
    return isinstance(e, torch.SymInt) and e.node.expr.is_Symbol


def shape_spec(src: Sequence, out: Sequence, expand: bool = False) -> Tuple[Optional[List[int]], Optional[str]]:
    """The spec's `ints` of a reshape (or expand) from src's extents to out's, or (None, why)."""
    spec: List[int] = []
    inferred = False
    for i, e in enumerate(out):
        if isinstance(e, int):
            spec.append(int(e))
            continue
        aligned = i - (len(out) - len(src))
        if expand and 0 <= aligned < len(src) and same_extent(src[aligned], e):
            spec.append(-1)
            continue
        match = next((j for j, s in enumerate(src) if not isinstance(s, int) and same_extent(s, e)), None)
        if match is not None:
            spec.append(-(match + 2))
        elif not expand and not inferred:
            inferred = True
            spec.append(-1)
        else:
            return None, (f"the output extents {_fmt(out)} have dynamic extents gearbox cannot express from the "
                          f"input's {_fmt(src)} (each must be an input extent, one may be inferred)")
    return spec, None


def _fmt(extents) -> str:
    return "[" + ", ".join(str(e) for e in extents) + "]"


def _axis(dim: int, rank: int) -> int:
    return dim % rank if rank else 0


# ---- validators --------------------------------------------------------------------------------


def _tensor(arg, what: str, dtypes=_DTYPES) -> Optional[str]:
    v = tensor_val(arg) if isinstance(arg, Node) else None
    if v is None:
        return f"{what} is not a tensor"
    if v.dim() > MAX_RANK:
        return f"{what} has rank {v.dim()}, above gearbox's {MAX_RANK}"
    if v.dtype not in dtypes:
        if v.dtype in (torch.bfloat16, torch.float16, torch.float64) and torch.float32 in dtypes:
            return (f"{what} '{arg.name}' is a {v.dtype} activation; gearbox's float math is f32 (cast the model "
                    "or the tensor to float32)")
        return f"{what} '{arg.name}' is {v.dtype}; this op reads {', '.join(TORCH_TO_DTYPE[d] for d in dtypes)}"
    return None


def _out(node: Node, dtypes=_DTYPES) -> Optional[str]:
    v = tensor_val(node)
    if v is None:
        return "the result is not one tensor"
    if v.dtype not in dtypes:
        if v.dtype in (torch.bfloat16, torch.float16, torch.float64) and torch.float32 in dtypes:
            return f"the result is {v.dtype}; gearbox's float math is f32"
        return f"the result is {v.dtype}, not one of {', '.join(TORCH_TO_DTYPE[d] for d in dtypes)}"
    if v.dim() > MAX_RANK:
        return f"the result has rank {v.dim()}, above gearbox's {MAX_RANK}"
    return None


def _first(*reasons) -> Optional[str]:
    return next((r for r in reasons if r), None)


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) or isinstance(x, bool)


_F32 = (torch.float32,)
_ARITH = (torch.float32, torch.int32, torch.int64)


# ---- unary -------------------------------------------------------------------------------------

_UNARY = {
    "aten.neg.default": "neg", "aten.exp.default": "exp", "aten.log.default": "log", "aten.sqrt.default": "sqrt",
    "aten.rsqrt.default": "rsqrt", "aten.tanh.default": "tanh", "aten.sigmoid.default": "sigmoid",
    "aten.silu.default": "silu", "aten.relu.default": "relu", "aten.abs.default": "abs", "aten.sin.default": "sin",
    "aten.cos.default": "cos", "aten.reciprocal.default": "reciprocal", "aten.erf.default": "erf",
}
_INT_UNARY = ("neg", "abs")


def _validate_unary(node, state):
    code = _UNARY[_key(node)]
    dtypes = _ARITH if code in _INT_UNARY else _F32
    return _first(_tensor(node.args[0], "the input", dtypes), _out(node, dtypes))


def _key(node) -> str:
    from gearbox.fx_util import op_key

    return op_key(node.target)


@register(*_UNARY, validate=_validate_unary)
def _emit_unary(node, nb):
    nb.add("unary", node, [nb.operand(node.args[0], "the input")], attrs={"code": _UNARY[_key(node)]})


def _validate_gelu(node, state):
    if bind(node).get("approximate", "none") not in ("none", "tanh"):
        return f"gelu approximate={bind(node).get('approximate')!r}"
    return _first(_tensor(node.args[0], "the input", _F32), _out(node, _F32))


@register("aten.gelu.default", validate=_validate_gelu)
def _emit_gelu(node, nb):
    code = "gelu_tanh" if bind(node).get("approximate", "none") == "tanh" else "gelu_erf"
    nb.add("unary", node, [nb.operand(node.args[0], "the input")], attrs={"code": code})


def _validate_logical_not(node, state):
    if _key(node) == "aten.bitwise_not.default" and tensor_val(node.args[0]).dtype != torch.bool:
        return "bitwise_not of integers (gearbox has logical_not of bools)"
    return _first(_tensor(node.args[0], "the input"), _out(node, (torch.bool,)))


@register("aten.logical_not.default", "aten.bitwise_not.default", validate=_validate_logical_not)
def _emit_logical_not(node, nb):
    x = nb.cast(nb.operand(node.args[0], "the input"), torch.bool)
    nb.add("unary", node, [x], attrs={"code": "logical_not"})


def _validate_pow_scalar(node, state):
    b = bind(node)
    if not isinstance(b["exponent"], (int, float)) or isinstance(b["exponent"], bool):
        return "the exponent is not a number"
    return _first(_tensor(b["self"], "the base", _F32), _out(node, _F32))


@register("aten.pow.Tensor_Scalar", validate=_validate_pow_scalar)
def _emit_pow_scalar(node, nb):
    b = bind(node)
    nb.add("unary", node, [nb.operand(b["self"], "the base")], attrs={"code": "pow_scalar",
                                                                    "alpha": float(b["exponent"])})


def _validate_clamp(node, state):
    b = bind(node)
    for a in ("min", "max"):
        if b.get(a) is not None and not isinstance(b[a], (int, float)):
            return f"clamp's {a} is not a number"
    return _first(_tensor(b["self"], "the input", _F32), _out(node, _F32))


@register("aten.clamp.default", validate=_validate_clamp)
def _emit_clamp(node, nb):
    b = bind(node)
    x = nb.operand(b["self"], "the input")
    lo, hi = b.get("min"), b.get("max")
    if lo is not None and hi is not None:
        nb.add("unary", node, [x], attrs={"code": "clamp", "alpha": float(lo), "beta": float(hi)})
        return
    # One bound (JSON has no infinity): the maximum or minimum with a 0-d constant.
    bound = nb.constant(torch.tensor(float(lo if lo is not None else hi)), f"{node.name}.bound")
    nb.add("binary", node, [x, bound], attrs={"code": "maximum" if lo is not None else "minimum"})


# ---- binary ------------------------------------------------------------------------------------

_ARITH_OPS = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "rsub": "sub", "maximum": "maximum",
              "minimum": "minimum", "pow": "pow"}
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
_LOGICAL = {"logical_and": "logical_and", "logical_or": "logical_or", "bitwise_and": "logical_and",
            "bitwise_or": "logical_or", "__and__": "logical_and", "__or__": "logical_or"}


def _operands(node) -> Tuple[object, object, float]:
    """(a, b, alpha) of a binary op node: rsub swaps; add/sub's alpha scales b."""
    b = bind(node)
    a, other = b.get("self", b.get("input")), b.get("other", b.get("exponent"))
    alpha = b.get("alpha", 1)
    if _key(node).startswith("aten.rsub."):
        a, other = other, a
    return a, other, alpha


def _promoted(a, b) -> torch.dtype:
    """torch's result dtype of an op on a and b (tensors by their fake values, or numbers)."""

    def probe(x):
        v = tensor_val(x)
        return torch.empty([1] * v.dim(), dtype=v.dtype) if v is not None else x

    return torch.result_type(probe(a), probe(b))


def _validate_binary(node, state):
    name = _key(node).split(".")[1]
    a, b, alpha = _operands(node)
    if not any(isinstance(x, Node) for x in (a, b)):
        return "no tensor operand"
    for x, what in ((a, "the first operand"), (b, "the second operand")):
        if isinstance(x, Node):
            reason = _tensor(x, what, _ARITH + (torch.bool,))
            if reason:
                return reason
        elif not _number(x):
            return f"{what} is {type(x).__name__}, not a tensor or a number"
    if name in _COMPARE:
        dtype = _promoted(a, b)
        if dtype not in _ARITH:
            return f"a comparison in {dtype}"
        return _out(node, (torch.bool,))
    if name in _LOGICAL:
        if not name.startswith("logical_") and any(tensor_val(x) is None or tensor_val(x).dtype != torch.bool
                                                   for x in (a, b)):
            return f"{name} of integers (gearbox has logical and/or of bools)"
        return _out(node, (torch.bool,))
    if name == "div" and bind(node).get("rounding_mode") is not None:
        mode = bind(node)["rounding_mode"]
        if mode != "trunc" or tensor_val(node).dtype not in _INTS:
            return f"div with rounding_mode={mode!r} (gearbox divides integers toward zero only)"
    elif name == "div" and tensor_val(node).dtype in _INTS:
        return "an integer true division"
    if name == "pow" and tensor_val(node).dtype != torch.float32:
        return "an integer pow"
    if alpha != 1 and not isinstance(alpha, (int, float)):
        return "alpha is not a number"
    return _out(node, _ARITH)


def _affine(code: str, a, b) -> Optional[Tuple[float, float]]:
    """(alpha, beta) of a tensor-and-number op as the unary x * alpha + beta, or None."""
    if isinstance(a, Node) == isinstance(b, Node):
        return None
    if isinstance(a, Node):
        c = float(b)
        return {"add": (1.0, c), "sub": (1.0, -c), "mul": (c, 0.0),
                "div": (1.0 / c, 0.0) if c not in (0.0,) and math.isfinite(c) else None}.get(code)
    c = float(a)
    return {"add": (1.0, c), "sub": (-1.0, c), "mul": (c, 0.0)}.get(code)


def _binary_inputs(node, nb: NetworkBuilder, dtype: torch.dtype, operands=None) -> List[str]:
    names = []
    for x in (operands or _operands(node)[:2]):
        if isinstance(x, Node):
            names.append(nb.cast(nb.operand(x, f"node '{node.name}' operand"), dtype))
        else:
            names.append(nb.constant(torch.tensor(x, dtype=dtype), f"{node.name}.scalar"))
    return names


def _emit_binary(node, nb):
    name = _key(node).split(".")[1]
    a, b, alpha = _operands(node)
    out = tensor_val(node).dtype
    if name in _COMPARE:
        ins = _binary_inputs(node, nb, _promoted(a, b))
        nb.add("binary", node, ins, attrs={"code": name})
        return
    if name in _LOGICAL:
        nb.add("binary", node, _binary_inputs(node, nb, torch.bool), attrs={"code": _LOGICAL[name]})
        return
    code = _ARITH_OPS[name]
    if not isinstance(b, Node) and code in ("add", "sub"):
        b, alpha = b * alpha, 1
    affine = _affine(code, a, b) if out == torch.float32 and alpha == 1 else None
    if affine is not None:
        x = a if isinstance(a, Node) else b
        nb.add("unary", node, [nb.cast(nb.operand(x, "the operand"), out)],
               attrs={"code": "affine", "alpha": affine[0], "beta": affine[1]})
        return
    ins = _binary_inputs(node, nb, out, (a, b))
    if alpha != 1:
        if out == torch.float32:
            ins[1] = nb.emit("unary", f"{node.name}.alpha", [ins[1]], out, attrs={"code": "affine",
                                                                                  "alpha": float(alpha), "beta": 0.0})
        else:
            k = nb.constant(torch.tensor(alpha, dtype=out), f"{node.name}.alpha")
            ins[1] = nb.emit("binary", f"{node.name}.alpha", [ins[1], k], out, attrs={"code": "mul"})
    nb.add("binary", node, ins, attrs={"code": code})


_BINARY_KEYS = [f"aten.{op}.{form}" for op in ("add", "sub", "mul", "div", "rsub") for form in ("Tensor", "Scalar")] + \
    ["aten.div.Tensor_mode", "aten.pow.Tensor_Tensor", "aten.maximum.default", "aten.minimum.default"] + \
    [f"aten.{op}.{form}" for op in _COMPARE for form in ("Tensor", "Scalar")] + \
    [f"aten.{op}.default" for op in _LOGICAL if op.startswith("logical_")] + \
    [f"aten.{op}.Tensor" for op in _LOGICAL if not op.startswith("logical_")]
register(*_BINARY_KEYS, validate=_validate_binary)(_emit_binary)


def _validate_where(node, state):
    b = bind(node)
    cond = b["condition"]
    for x, what in ((b["self"], "'self'"), (b["other"], "'other'")):
        if isinstance(x, Node):
            reason = _tensor(x, what)
            if reason:
                return reason
        elif not _number(x):
            return f"{what} is not a tensor or a number"
    return _first(_tensor(cond, "the condition"), _out(node))


@register("aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar",
          validate=_validate_where)
def _emit_where(node, nb):
    b = bind(node)
    out = tensor_val(node).dtype
    ins = [nb.cast(nb.operand(b["condition"], "the condition"), torch.bool)]
    for x in (b["self"], b["other"]):
        ins.append(nb.cast(nb.operand(x, "an operand"), out) if isinstance(x, Node)
                   else nb.constant(torch.tensor(x, dtype=out), f"{node.name}.scalar"))
    nb.add("where", node, ins)


def _validate_masked_fill(node, state):
    b = bind(node)
    if not _number(b["value"]):
        return "the fill value is not a number"
    return _first(_tensor(b["self"], "the input"), _tensor(b["mask"], "the mask"), _out(node))


@register("aten.masked_fill.Scalar", validate=_validate_masked_fill)
def _emit_masked_fill(node, nb):
    b = bind(node)
    out = tensor_val(node).dtype
    mask = nb.cast(nb.operand(b["mask"], "the mask"), torch.bool)
    fill = nb.constant(torch.tensor(b["value"], dtype=out), f"{node.name}.value")
    nb.add("where", node, [mask, fill, nb.cast(nb.operand(b["self"], "the input"), out)])


# ---- reductions and softmax --------------------------------------------------------------------

_REDUCE = {"aten.sum.dim_IntList": "sum", "aten.sum.default": "sum", "aten.mean.dim": "mean",
           "aten.mean.default": "mean", "aten.amax.default": "amax", "aten.amin.default": "amin"}


def _reduce_axes(node) -> List[int]:
    b = bind(node)
    dims = b.get("dim")
    rank = tensor_val(b["self"]).dim()
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return []
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted({_axis(d, rank) for d in dims})


def _validate_reduce(node, state):
    b = bind(node)
    if b.get("dtype") not in (None, torch.float32):
        return f"a reduction to {b['dtype']}"
    return _first(_tensor(b["self"], "the input", _F32), _out(node, _F32))


@register(*_REDUCE, validate=_validate_reduce)
def _emit_reduce(node, nb):
    b = bind(node)
    nb.add("reduce", node, [nb.operand(b["self"], "the input")],
           attrs={"code": _REDUCE[_key(node)], "axes": _reduce_axes(node), "keepdim": bool(b.get("keepdim", False))})


_SOFTMAX = {"aten._softmax.default": "softmax", "aten.softmax.int": "softmax",
            "aten._log_softmax.default": "log_softmax", "aten.log_softmax.int": "log_softmax"}


def _validate_softmax(node, state):
    b = bind(node)
    if b.get("half_to_float") or b.get("dtype") not in (None, torch.float32):
        return "a softmax that changes the dtype"
    return _first(_tensor(b["self"], "the input", _F32), _out(node, _F32))


@register(*_SOFTMAX, validate=_validate_softmax)
def _emit_softmax(node, nb):
    b = bind(node)
    rank = tensor_val(b["self"]).dim()
    nb.add("softmax", node, [nb.operand(b["self"], "the input")],
           attrs={"code": _SOFTMAX[_key(node)], "axis": _axis(b["dim"], rank)})


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


_CASTS = ("aten._to_copy.default", "dim_order_ops._to_dim_order_copy.default", "aten.to.dtype",
          "aten.to.dtype_layout")


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


def _validate_full(node, state):
    v = tensor_val(node)
    if v is None or not all(isinstance(e, int) for e in v.shape):
        return "a tensor of dynamic shape made in the graph"
    nodes = []
    torch.fx.node.map_arg((node.args, node.kwargs), nodes.append)
    if nodes:
        return "a tensor made from dynamic sizes or tensors"
    return _out(node)


@register(*_FULL, validate=_validate_full)
def _emit_full(node, nb):
    kwargs = {k: v for k, v in node.kwargs.items() if k in ("dtype",)}
    op = getattr(node.target, "_op", node.target)
    value = op(*node.args, **kwargs)
    key = nb.fresh(f"{node.name}.value")
    nb.weights[key] = value.contiguous()
    nb.add("constant", node, [], weights=[key])


# Shape queries and metadata checks: no value of their own in the network.
register("aten.sym_size.int", "aten._assert_tensor_metadata.default", kind=SIZE)(None)

