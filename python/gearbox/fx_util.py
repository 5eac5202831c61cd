"""Small helpers over torch.fx graphs of ExportedPrograms (ATen or ExecuTorch edge dialect),
shared by the pattern rewrites, the converters and the partitioner."""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence

import torch
from torch.fx import Node


def op_key(target) -> str:
    """'aten.linear.default' for aten.linear.default and its edge-dialect twin;
    'gearbox.rms_norm.default' for gearbox ops; '' for anything that is not an op."""
    op = target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", None)  # edge ops wrap one
    if isinstance(op, torch._ops.OpOverload):
        return str(op)
    return ""


def is_op(node, *keys: str) -> bool:
    """node is a call of one of the ops named by keys ('aten.add.Tensor', ...)."""
    return isinstance(node, Node) and node.op == "call_function" and op_key(node.target) in keys


def val(node):
    """The fake value torch.export recorded for node (a FakeTensor, SymInt, ...), or None."""
    return node.meta.get("val") if isinstance(node, Node) else None


def tensor_val(node) -> Optional[torch.Tensor]:
    v = val(node)
    return v if isinstance(v, torch.Tensor) else None


def is_float(node) -> bool:
    v = tensor_val(node)
    return v is not None and v.dtype.is_floating_point


def shape(node) -> Optional[tuple]:
    v = tensor_val(node)
    return tuple(v.shape) if v is not None else None


def dim_name(extent) -> str:
    """The name of the torch.export Dim a symbolic extent stands for ('seq'), else the
    symbol ('s27')."""
    try:
        env = extent.node.shape_env
        for source in env.var_to_sources.get(extent.node.expr, []):
            if source.name in env.source_name_to_debug_name:
                return env.source_name_to_debug_name[source.name]
    except Exception:  # noqa: BLE001  (the name is for messages only)
        pass
    return str(extent)


def same_extent(a, b) -> bool:
    """Two extents (ints or SymInts) that are equal for every value of the symbols."""
    try:
        return bool(a == b) if isinstance(a, int) and isinstance(b, int) else str(a) == str(b)
    except Exception:  # noqa: BLE001  (a symbolic comparison that cannot be decided)
        return False


def same_shape(a: Sequence, b: Sequence) -> bool:
    return len(a) == len(b) and all(same_extent(x, y) for x, y in zip(a, b))


def bind(node: Node) -> Dict[str, object]:
    """The node's arguments by schema name, defaults filled in."""
    op = node.target if isinstance(node.target, torch._ops.OpOverload) else getattr(node.target, "_op", None)
    schema = getattr(op, "_schema", None)
    if schema is None:
        return {}
    out = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


class ProgramState:
    """What the placeholders of an ExportedProgram stand for: parameters, buffers (mutable
    or not), lifted constants and user inputs, with their values."""

    def __init__(self, program):
        sig = program.graph_signature
        self.program = program
        self.params = dict(sig.inputs_to_parameters)
        self.buffers = dict(getattr(sig, "inputs_to_buffers", {}) or {})
        self.constants = dict(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
        self.user_inputs = list(sig.user_inputs)
        self.mutated = set((getattr(sig, "buffers_to_mutate", {}) or {}).values())

    def target(self, node) -> Optional[str]:
        """The state-dict name of a parameter/buffer/constant placeholder, else None."""
        if not isinstance(node, Node) or node.op != "placeholder":
            return None
        return self.params.get(node.name) or self.buffers.get(node.name) or self.constants.get(node.name)

    def is_param(self, node) -> bool:
        """A parameter, or a buffer/constant the graph never writes (weights may be either)."""
        name = self.target(node)
        return name is not None and name not in self.mutated

    def is_mutable_buffer(self, node) -> bool:
        name = self.target(node)
        return name is not None and name in self.mutated

    def value(self, node) -> Optional[torch.Tensor]:
        name = self.target(node)
        if name is None:
            return None
        if name in self.program.state_dict:
            return self.program.state_dict[name]
        return (getattr(self.program, "constants", {}) or {}).get(name)

    def scalar(self, arg) -> Optional[float]:
        """A Python number, or a one-element constant tensor the graph never writes."""
        if isinstance(arg, bool):
            return None
        if isinstance(arg, (int, float)):
            return float(arg)
        if isinstance(arg, Node) and self.is_param(arg):
            v = self.value(arg)
            if isinstance(v, torch.Tensor) and v.numel() == 1 and not isinstance(v, torch._subclasses.FakeTensor):
                return float(v.reshape(()).item())
        return None


def cone(outputs: Iterable[Node], stop: Callable[[Node], bool] = lambda n: False) -> List[Node]:
    """The nodes outputs depend on (outputs included), in graph order; a node for which
    stop() is true is included but not looked through."""
    seen = set()
    stack = list(outputs)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if stop(n):
            continue
        for a in n.all_input_nodes:
            stack.append(a)
    order = {n: i for i, n in enumerate(next(iter(seen)).graph.nodes)} if seen else {}
    return sorted(seen, key=order.__getitem__)


class EvaluationError(Exception):
    """A cone could not be evaluated (it reads something without a value)."""


def evaluate(outputs: Sequence[Node], state: ProgramState, given: Dict[Node, object]) -> List[object]:
    """Runs the cone of outputs eagerly: placeholders and the nodes in `given` take the
    given values, parameters and buffers their stored values. Raises EvaluationError if
    the cone reads a user input that is not given."""
    env: Dict[Node, object] = dict(given)
    for n in cone(outputs, stop=lambda n: n in given):
        if n in env:
            continue
        if n.op == "placeholder":
            v = state.value(n)
            if v is None or isinstance(v, torch._subclasses.FakeTensor):
                raise EvaluationError(f"'{n.name}' has no value here")
            env[n] = v.clone()
        elif n.op == "call_function":
            args = torch.fx.node.map_arg(n.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(n.kwargs, env.__getitem__)
            try:
                env[n] = n.target(*args, **kwargs)
            except Exception as e:  # noqa: BLE001  (the reason goes into a validator's message)
                raise EvaluationError(f"'{n.name}' failed: {e}") from None
        else:
            raise EvaluationError(f"'{n.name}' is a {n.op} node")
    return [env[o] for o in outputs]


def add_node(graph: torch.fx.Graph, target, args, kwargs=None, like: Optional[Node] = None,
             fake_args: Optional[tuple] = None) -> Node:
    """A new call_function node at the graph's insert point, its fake value computed from
    its inputs' values (or from fake_args: a view's shape with the symbolic extent in
    place of -1, which would otherwise make the shape environment specialize it)."""
    node = graph.call_function(target, tuple(args), kwargs or {})
    fake_args = torch.fx.node.map_arg(fake_args if fake_args is not None else node.args, lambda a: a.meta["val"])
    fake_kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: a.meta["val"])
    mode = torch._guards.detect_fake_mode([v for v in torch.utils._pytree.tree_leaves((fake_args, fake_kwargs))
                                           if isinstance(v, torch.Tensor)])
    if mode is None:
        raise RuntimeError(f"no fake mode for a new {target} node")
    with mode, torch.no_grad():
        key = op_key(target)
        # The *_copy ops' meta functions specialize a symbolic extent to its example value;
        # the tensor methods give the same value and keep the symbol.
        if key == "aten.view_copy.default":
            node.meta["val"] = fake_args[0].reshape(fake_args[1]).contiguous()
        elif key == "aten.permute_copy.default":
            node.meta["val"] = fake_args[0].permute(fake_args[1]).contiguous()
        else:
            node.meta["val"] = target(*fake_args, **fake_kwargs)
    if like is not None:
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack", "from_node", "torch_fn"):
            if key in like.meta:
                node.meta[key] = like.meta[key]
    return node
