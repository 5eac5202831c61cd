"""The converter registry: which graph nodes gearbox runs, and the IR each becomes.

Every converter has a validator that says why a node cannot run in gearbox (None when it
can) and an emitter that writes the node's IR into a `NetworkBuilder`. The partitioner
claims what the validators accept; preprocess emits it. Kinds:

    ir      emits IR nodes (gearbox ops, linear, embedding, residual add, last position,
            and the generic ops of gearbox.converters_generic)
    alias   a layout op whose value is an IR tensor unchanged (a view round trip, a clone)
    state   a KV cache write (and the index it reads): the attention op keeps the cache in
            gearbox's execution context, so the write emits nothing
    size    a shape query (aten.sym_size) read by the views of the same delegate

An op may have several converters, tried in registration order: the fast ones (gearbox
ops, linear, add of equal shapes, the last position, view round trips) come first, so a
generic converter only takes a node none of them accepts.

    conv, reason = choose(node, state)  # conv None: why no converter takes it
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch.fx import Node

from gearbox.fx_util import ProgramState, bind, is_op, op_key, shape, tensor_val
from gearbox.layout import flat_source, form_of, is_layout, strip_identity

IR, ALIAS, STATE, SIZE = "ir", "alias", "state", "size"

# Per gearbox op: (tensor inputs, weight args, attrs {IR attr: arg name}).
GEARBOX_OPS = {
    "embedding": (["ids"], ["table"], {"scale": "scale"}),
    "rms_norm": (["x"], ["weight"], {"eps": "eps", "weight_offset": "weight_offset", "head_dim": "head_dim"}),
    "linear": (["x"], ["weight", "bias"], {}),
    "rope": (["x", "positions"], ["inv_freq"],
             {"theta": "theta", "scale": "scale", "heads": "heads", "head_dim": "head_dim"}),
    "attention": (["q", "k", "v", "positions"], [],
                  {"state": "state", "heads": "heads", "kv_heads": "kv_heads", "head_dim": "head_dim",
                   "window": "window", "scale": "scale"}),
    "gelu_tanh_mul": (["gate", "up"], [], {}),
    "silu_mul": (["gate", "up"], [], {}),
    "add": (["a", "b"], [], {}),
    "take_last": (["x"], [], {}),
}

STATE_WRITES = ("aten.index_put.default", "aten.index_put_.default", "aten.index_copy.default",
                "aten.index_copy_.default")
_SLICE_END_OPEN = 2 ** 62  # torch.export writes an open slice end as INT64_MAX


class LoweringError(ValueError):
    """The graph holds something gearbox cannot run; the message names the node."""


@dataclasses.dataclass(frozen=True)
class Converter:
    kind: str
    validate: Callable[[Node, ProgramState], Optional[str]]
    emit: Optional[Callable[[Node, "NetworkBuilder"], None]] = None


_REGISTRY: Dict[str, List[Converter]] = {}


def register(*ops: str, kind: str = IR, validate=None):
    """Registers the decorated emitter (or, for kind alias/state/size, no emitter) for ops,
    after the converters already registered for them."""

    def wrap(emit):
        for op in ops:
            _REGISTRY.setdefault(op, []).append(Converter(kind, validate or (lambda n, s: None), emit))
        return emit

    return wrap


def _candidates(node: Node) -> List[Converter]:
    key = op_key(node.target)
    if key.startswith("gearbox."):
        return [_GEARBOX]
    return _REGISTRY.get(key, [])


def choose(node: Node, state: ProgramState) -> Tuple[Optional[Converter], Optional[str]]:
    """The first converter that accepts node, or (None, why none does). Memoized per
    ProgramState (a program's graph does not change while it is partitioned or lowered)."""
    cache = state.__dict__.setdefault("_choices", {})
    if node in cache:
        return cache[node]
    candidates = _candidates(node)
    result: Tuple[Optional[Converter], Optional[str]] = (None, "no converter")
    for conv in candidates:
        reason = _special_reason(node, conv) or conv.validate(node, state)
        if not reason:
            result = (conv, None)
            break
        result = (None, reason)
    cache[node] = result
    return result


def converter_for(node: Node, state: ProgramState) -> Optional[Converter]:
    """The converter that takes node, or None."""
    return choose(node, state)[0]


def gearbox_op_name(target) -> Optional[str]:
    """'rms_norm' for torch.ops.gearbox.rms_norm(.default) in ATen or edge dialect."""
    key = op_key(target)
    return key.split(".")[1] if key.startswith("gearbox.") else None


# ---- validators -----------------------------------------------------------------------------


def _activation(arg, state: ProgramState, what: str) -> Optional[str]:
    if not isinstance(arg, Node) or tensor_val(arg) is None:
        return f"{what} is not a tensor"
    if state.target(arg) is not None:
        return f"{what} '{arg.name}' is a parameter or buffer, not an activation"
    if is_layout(arg) and flat_source(arg) is None:
        return f"{what} '{arg.name}' is a {tuple(shape(arg))} view; gearbox's IR reads [B, T, F] activations"
    return None


def _f32_activation(arg, state: ProgramState, what: str) -> Optional[str]:
    """An f32 tensor computed by the graph (any layout: a view gearbox does not alias is a
    generic reshape of its own, or a delegate input)."""
    v = tensor_val(arg) if isinstance(arg, Node) else None
    if v is None:
        return f"{what} is not a tensor"
    if state.target(arg) is not None:
        return f"{what} '{arg.name}' is a parameter or buffer, not an activation"
    if v.dtype != torch.float32:
        return f"{what} '{arg.name}' is {v.dtype}; this fast path reads f32 activations"
    return None


def _weight(arg, state: ProgramState, what: str, rank: int) -> Optional[str]:
    if not state.is_param(arg):
        return f"{what} is not a parameter of the model"
    if len(shape(arg)) != rank:
        return f"{what} has rank {len(shape(arg))}, not {rank}"
    if tensor_val(arg).dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return f"{what} is {tensor_val(arg).dtype}; gearbox reads f32, bf16, f16 weights"
    return None


def _first(*reasons) -> Optional[str]:
    return next((r for r in reasons if r), None)


def _validate_gearbox(node: Node, state: ProgramState) -> Optional[str]:
    op = gearbox_op_name(node.target)
    if op not in GEARBOX_OPS:
        return f"gearbox.{op} is not an op of this gearbox"
    tensors, weights, _ = GEARBOX_OPS[op]
    b = bind(node)
    for a in tensors:
        v = b.get(a)
        if isinstance(v, Node) and tensor_val(v) is not None and not tensor_val(v).dtype.is_floating_point:
            continue  # ids, positions
        reason = _activation(v, state, f"argument '{a}'")
        if reason:
            return reason
    for a in weights:
        if b.get(a) is not None and not state.is_param(b[a]):
            return f"weight '{a}' is not a parameter of the model"
    return None


def _validate_linear(node, state):
    b = bind(node)
    if tensor_val(b["input"]) is not None and tensor_val(b["input"]).dim() < 2:
        return "a linear of a rank-1 input"
    return _first(_f32_activation(b["input"], state, "the input"), _weight(b["weight"], state, "the weight", 2),
                  b.get("bias") is not None and _weight(b["bias"], state, "the bias", 1))


def _validate_embedding(node, state):
    b = bind(node)
    ids = tensor_val(b["indices"])
    if ids is None or ids.dtype not in (torch.int32, torch.int64):
        return "the ids are not an int32/int64 tensor"
    if ids.dim() != 2:
        return f"the ids have rank {ids.dim()}; the embedding op reads [B, T] ids"
    return _weight(b["weight"], state, "the table", 2)


def _validate_add(node, state):
    b = bind(node)
    if b.get("alpha", 1) != 1:
        return "add with alpha"
    for a in ("self", "other"):
        if not isinstance(b[a], Node) or tensor_val(b[a]) is None or not tensor_val(b[a]).dtype.is_floating_point:
            return f"'{a}' is not a float tensor (gearbox adds two activations)"
    if shape(b["self"]) != shape(b["other"]):
        return f"broadcasting add {tuple(shape(b['self']))} + {tuple(shape(b['other']))}"
    return _first(_f32_activation(b["self"], state, "'self'"), _f32_activation(b["other"], state, "'other'"))


def _validate_take_last(node, state):
    b = bind(node)
    s = shape(node)
    if len(s) != 3 or b["dim"] % 3 != 1 or b.get("step", 1) != 1:
        return "a slice other than x[:, -1:, :] of a [B, T, F] activation"
    end = b.get("end")
    if b.get("start") != -1 or not (end is None or (isinstance(end, int) and end >= _SLICE_END_OPEN)):
        return "a slice other than the last position"
    return _f32_activation(b["self"], state, "the input")


def _validate_layout(node, state):
    if flat_source(node) is not None or _feeds_state_writes_only(node):
        return None
    return f"a layout op to {tuple(shape(node))}, not a view round trip of an activation"


def _feeds_state_writes_only(node: Node) -> bool:
    users = list(node.users)
    return bool(users) and all(is_op(u, *STATE_WRITES) or (is_layout(u) and _feeds_state_writes_only(u))
                               for u in users)


def _validate_state_write(node, state):
    buf = node.args[0]
    if not state.is_mutable_buffer(buf):
        return f"'{getattr(buf, 'name', buf)}' is not a mutable buffer of the model"
    value = node.args[2] if is_op(node, "aten.index_put.default", "aten.index_put_.default") else node.args[3]
    form = form_of(value)
    if form is None:
        return "the value written is not a view of an activation"
    for user in form.src.users:
        if is_op(user, "gearbox.attention.default") and form.src in bind(user).values() and \
                form.src in (bind(user)["k"], bind(user)["v"]):
            return None
    return "a buffer write that no gearbox attention op stands for (a KV cache gearbox does not own)"


# ---- the network being built -----------------------------------------------------------------


TORCH_TO_DTYPE = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.int32: "i32",
                  torch.int64: "i64", torch.bool: "bool"}


class NetworkBuilder:
    """Collects the network description of one delegate (docs/FORMAT.md)."""

    def __init__(self, state: ProgramState, max_context: int, metadata):
        self.state = state
        self.desc = {"format": "gearbox-network", "version": 1, "max_context": int(max_context), "inputs": [],
                     "outputs": [], "states": [], "nodes": [], "metadata": dict(metadata or {})}
        self.weights: Dict[str, torch.Tensor] = {}
        self.names: Dict[Node, str] = {}
        self.dtypes: Dict[str, torch.dtype] = {}  # tensor name -> dtype, for the casts generic ops insert
        self.slots: Dict[int, int] = {}  # the graph's attention state -> this network's slot
        self._constants: Dict[str, str] = {}  # weight name -> the constant node's tensor
        self._taken = set()

    def tensor(self, node, what: str) -> str:
        src = node if node in self.names else flat_source(node)
        if src not in self.names:
            raise LoweringError(f"{what} '{getattr(node, 'name', node)}' is not an activation gearbox computes")
        return self.names[src]

    def weight(self, node: Node) -> str:
        name = self.state.target(node)
        value = self.state.value(node)
        if name is None or value is None:
            raise LoweringError(f"weight '{node.name}' has no value in the program")
        self.weights[name] = value
        return name

    def fresh(self, base: str) -> str:
        """A tensor or node name not used yet in this network."""
        name, i = base, 0
        while name in self._taken or name in self.dtypes or name in self.weights:
            i += 1
            name = f"{base}.{i}"
        self._taken.add(name)
        return name

    def add(self, op: str, node: Node, inputs, weights=(), attrs=None) -> None:
        entry = {"op": op, "name": node.name, "inputs": list(inputs), "outputs": [node.name],
                 "weights": list(weights)}
        if attrs:
            entry["attrs"] = attrs
        dtype = tensor_val(node).dtype if tensor_val(node) is not None else torch.float32
        if dtype != torch.float32:
            entry["dtypes"] = [TORCH_TO_DTYPE[dtype]]
        self.desc["nodes"].append(entry)
        self._taken.add(node.name)
        self.names[node] = node.name
        self.dtypes[node.name] = dtype

    def emit(self, op: str, base: str, inputs, dtype: torch.dtype = torch.float32, weights=(), attrs=None,
             out: Optional[str] = None) -> str:
        """Appends one node with one output (named `out`, else a fresh name from base);
        returns the output's tensor name."""
        name = out or self.fresh(base)
        self._taken.add(name)
        entry = {"op": op, "name": name, "inputs": list(inputs), "outputs": [name], "weights": list(weights)}
        if attrs:
            entry["attrs"] = attrs
        if dtype != torch.float32:
            entry["dtypes"] = [TORCH_TO_DTYPE[dtype]]
        self.desc["nodes"].append(entry)
        self.dtypes[name] = dtype
        return name

    def constant(self, value: torch.Tensor, base: str) -> str:
        """A `constant` node holding value (stored as a weight of its own)."""
        key = self.fresh(base)
        self.weights[key] = value.detach().contiguous().cpu()
        return self._scalar_view(self.emit("constant", key, [], value.dtype, [key], out=key), value)

    def _scalar_view(self, name: str, value: torch.Tensor) -> str:
        """Weights have rank 1 to 8: a 0-d value is stored as [1] and its constant node is
        reshaped back to []."""
        if value.dim() != 0:
            return name
        self.weights[self.desc["nodes"][-1]["weights"][0]] = value.detach().reshape(1).contiguous().cpu()
        return self.emit("reshape", f"{name}.scalar", [name], value.dtype, attrs={"shape": []})

    def operand(self, arg, what: str) -> str:
        """The tensor name of a generic op's input: an IR tensor, or a parameter, buffer or
        lifted constant read through one `constant` node per weight."""
        if isinstance(arg, Node) and self.state.target(arg) is not None and arg not in self.names:
            name = self.weight(arg)
            if name not in self._constants:
                tensor = self.weights[name]
                self._constants[name] = self._scalar_view(
                    self.emit("constant", f"{arg.name}.constant", [], tensor.dtype, [name]), tensor)
            return self._constants[name]
        return self.tensor(arg, what)

    def dtype_of(self, name: str) -> torch.dtype:
        return self.dtypes.get(name, torch.float32)

    def cast(self, name: str, dtype: torch.dtype) -> str:
        """name as dtype: name itself, or a new `cast` node."""
        if self.dtype_of(name) == dtype:
            return name
        return self.emit("cast", f"{name}.to_{TORCH_TO_DTYPE[dtype]}", [name], dtype)


def _emit_gearbox(node: Node, nb: NetworkBuilder) -> None:
    op = gearbox_op_name(node.target)
    tensors, weights, attr_args = GEARBOX_OPS[op]
    b = bind(node)
    inputs = [nb.tensor(b[a], f"node '{node.name}': argument '{a}'") for a in tensors]
    names = [nb.weight(b[a]) for a in weights if b.get(a) is not None]
    attrs = {ir: b[a] for ir, a in attr_args.items()}
    if op == "linear" and len(names) == 2:
        attrs["has_bias"] = 1
    if op == "attention":
        slot = nb.slots.setdefault(int(b["state"]), len(nb.slots))
        attrs["state"] = slot
        nb.desc["states"].append({"name": f"{node.name}.kv_cache", "dtype": "f32", "rows": nb.desc["max_context"],
                                  "width": int(b["kv_heads"]) * int(b["head_dim"])})
    nb.add(op, node, inputs, names, attrs)


_GEARBOX = Converter(IR, _validate_gearbox, _emit_gearbox)


@register("aten.linear.default", validate=_validate_linear)
def _emit_linear(node, nb):
    b = bind(node)
    weights = [nb.weight(b["weight"])] + ([nb.weight(b["bias"])] if b.get("bias") is not None else [])
    nb.add("linear", node, [nb.tensor(b["input"], "the input")], weights, {"has_bias": 1} if len(weights) == 2 else None)


@register("aten.embedding.default", validate=_validate_embedding)
def _emit_embedding(node, nb):
    b = bind(node)
    nb.add("embedding", node, [nb.tensor(b["indices"], "the ids")], [nb.weight(b["weight"])], {"scale": 1.0})


@register("aten.add.Tensor", validate=_validate_add)
def _emit_add(node, nb):
    b = bind(node)
    nb.add("add", node, [nb.tensor(b["self"], "'self'"), nb.tensor(b["other"], "'other'")])


@register("aten.slice_copy.Tensor", "aten.slice.Tensor", validate=_validate_take_last)
def _emit_take_last(node, nb):
    nb.add("take_last", node, [nb.tensor(bind(node)["self"], "the input")])


register("aten.view_copy.default", "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
         "aten.permute_copy.default", "aten.permute.default", "aten.transpose.int", "aten.transpose_copy.int",
         "aten.clone.default", "aten.alias_copy.default", "aten.alias.default", "dim_order_ops._clone_dim_order.default",
         "aten._to_copy.default", "dim_order_ops._to_dim_order_copy.default",
         kind=ALIAS, validate=_validate_layout)(None)
register(*STATE_WRITES, kind=STATE, validate=_validate_state_write)(None)


def _special_reason(node: Node, conv: Converter) -> Optional[str]:
    if conv.kind == ALIAS and is_op(node, "aten._to_copy.default", "dim_order_ops._to_dim_order_copy.default") \
            and strip_identity(node) is node:
        return "a dtype cast, not a view"
    return None


def supported(node: Node, state: ProgramState) -> Optional[str]:
    """None when gearbox can run node, else why not."""
    return choose(node, state)[1]


from gearbox import converters_generic  # noqa: E402,F401  (registers the generic converters after these)
