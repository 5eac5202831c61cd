"""Converters for the generic IR ops (docs/FORMAT.md "Network description"): here the
shared helpers, elementwise math with broadcasting, comparisons and `where`, reductions and
softmax; gearbox.converters_nn holds matmul, linear, attention and layer norm,
gearbox.converters_layout the layout ops, casts, gathers and constants.

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
from typing import List, Optional, Sequence, Tuple

import torch
from torch.fx import Node

from gearbox.converters import IR, TORCH_TO_DTYPE, NetworkBuilder
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


_CASTS = ("aten._to_copy.default", "dim_order_ops._to_dim_order_copy.default", "aten.to.dtype",
          "aten.to.dtype_layout")
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


# The converters of the other generic op families register after these.
from gearbox import converters_layout, converters_nn  # noqa: E402,F401
