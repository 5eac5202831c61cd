"""Capability-based partitioning: which nodes of a program gearbox takes, in which
delegates, and a report of what stays on ExecuTorch and why.

Every node the converter registry accepts is claimable. torch.fx's
CapabilityBasedPartitioner groups claimable nodes into convex partitions (no path leaves a
partition and comes back), each one delegate. A partition must also be something the
engine can bind: it reads tensors (of rank <= 8, f32 bf16 f16 i32 i64 or bool, each extent
a number or the program's dynamic dim itself) besides weights and the KV caches it owns,
and what it hands back are tensors it computes. Nodes that break this are given back to
ExecuTorch and the partitions are formed again.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional

import torch
from torch.fx import Node
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from gearbox.converters import ALIAS, IR, SIZE, STATE, converter_for, supported
from gearbox.fx_util import ProgramState, op_key, tensor_val
from gearbox.layout import flat_source

# Ops kept whole through ExecuTorch's decompositions, so that the rewrites and converters
# see them as the model wrote them.
KEEP_WHOLE = (torch.ops.aten.linear.default, torch.ops.aten.scaled_dot_product_attention.default,
              torch.ops.aten.silu.default, torch.ops.aten.gelu.default)

_BINDABLE = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool)
_MAX_RANK = 8
_NOT_COUNTED = ("", "executorch_call_delegate")
_MAX_ROUNDS = 16
_NOT_CLAIMED = "not claimed by this partitioner"


def _is_bookkeeping(node: Node) -> bool:
    """Integer/bool index arithmetic and shape queries (positions, masks, cache lengths):
    reported, not counted as compute."""
    if op_key(node.target).startswith("gearbox."):
        return False
    v = node.meta.get("val")
    values = v if isinstance(v, (tuple, list)) else [v]
    return not any(isinstance(t, torch.Tensor) and t.dtype.is_floating_point for t in values)


def _counted(node: Node) -> bool:
    return node.op == "call_function" and op_key(node.target) not in _NOT_COUNTED \
        and getattr(node.target, "__name__", "") not in ("getitem", "executorch_call_delegate")


@dataclasses.dataclass
class DelegationReport:
    """What a partitioner delegated. `left` maps an op to (count, reasons) for compute left
    on ExecuTorch; `bookkeeping` the same for integer/bool index arithmetic."""

    compute: int = 0
    delegated: int = 0
    delegates: int = 0
    left: Dict[str, List] = dataclasses.field(default_factory=dict)
    bookkeeping: Dict[str, List] = dataclasses.field(default_factory=dict)
    rewrites: Dict[str, int] = dataclasses.field(default_factory=dict)
    misses: List = dataclasses.field(default_factory=list)

    @property
    def left_compute(self) -> int:
        return self.compute - self.delegated

    def text(self) -> str:
        pct = 100.0 * self.delegated / self.compute if self.compute else 100.0
        lines = [f"gearbox: delegated {self.delegated} of {self.compute} compute nodes ({pct:.0f}%) to "
                 f"{self.delegates} delegate{'s' if self.delegates != 1 else ''}"]
        for title, table in (("left on ExecuTorch", self.left), ("index bookkeeping on ExecuTorch", self.bookkeeping)):
            for op, (count, reasons) in sorted(table.items()):
                shown = sorted(reasons)[:2] + ([f"{len(reasons) - 2} more reasons"] if len(reasons) > 2 else [])
                lines.append(f"  {title}: {op} x{count}: {'; '.join(shown)}")
        if self.rewrites:
            lines.append("  rewritten: " + ", ".join(f"{k} x{v}" for k, v in sorted(self.rewrites.items())))
        for pattern, node, reason in self.misses:
            lines.append(f"  not rewritten as {pattern}: '{node}': {reason}")
        return "\n".join(lines)


@dataclasses.dataclass
class Plan:
    partitions: List[List[Node]]
    cache_rows: Dict[int, int]
    report: DelegationReport


class _Support(OperatorSupportBase):
    def __init__(self, verdicts: Dict[Node, Optional[str]]):
        self.verdicts = verdicts

    def is_node_supported(self, submodules, node: Node) -> bool:
        if node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem":
            node = node.args[0]  # a piece of a split or layer norm goes with it
        return node in self.verdicts and self.verdicts[node] is None


def _binding_problem(a: Node) -> Optional[str]:
    """Why the engine cannot take a's value as an input, or None."""
    v = tensor_val(a)
    if v is None:
        return f"reads '{a.name}' ({type(a.meta.get('val')).__name__}), not a tensor, from outside the delegate"
    what = f"'{a.name}' ({v.dtype} {list(v.shape)})"
    if v.dtype not in _BINDABLE:
        return f"reads {what} from outside the delegate; gearbox binds f32, bf16, f16, i32, i64 and bool tensors"
    if not 1 <= v.dim() <= _MAX_RANK:
        return f"reads {what} from outside the delegate; gearbox binds tensors of rank 1 to {_MAX_RANK}"
    for e in v.shape:
        if not isinstance(e, int) and not (isinstance(e, torch.SymInt) and e.node.expr.is_Symbol):
            return (f"reads {what} from outside the delegate; its extent {e} is not the dynamic dim itself (an "
                    "engine input's dynamic extents are the profiles' range)")
    return None


def _kind(n: Node, state: ProgramState) -> str:
    """The converter kind of a partition member; a getitem is a value of its producer's."""
    if n.op == "call_function" and getattr(n.target, "__name__", "") == "getitem":
        return IR
    conv = converter_for(n, state)
    return conv.kind if conv is not None else ""


def _boundary_problems(part: List[Node], state: ProgramState, verdicts) -> Dict[Node, str]:
    """Nodes of a partition that make it unbindable, each with the reason."""
    members = set(part)
    problems: Dict[Node, str] = {}
    for n in part:
        for a in n.all_input_nodes:
            if a in members:
                continue
            if state.is_mutable_buffer(a):
                if any(u not in members for u in a.users):
                    problems[n] = f"the buffer '{a.name}' is also used outside the delegate"
                continue
            if state.target(a) is not None:
                continue  # a weight, moved into the delegate
            reason = _binding_problem(a)
            if reason:
                problems[n] = reason
        outside_users = [u for u in n.users if u not in members and u.op != "output"]
        kind = _kind(n, state)
        if outside_users and kind == SIZE:
            problems[n] = "a size that ExecuTorch would read from the delegate"
        elif outside_users and kind != IR and not (kind == ALIAS and flat_source(n) is not None):
            problems[n] = "a view or cache write that ExecuTorch would read from the delegate"
        if n.op == "call_function" and kind == STATE and any(u.op == "output" for u in n.users) \
                and not state.is_mutable_buffer(n.args[0]):
            problems[n] = "a buffer write the delegate cannot own"
    if not any(_kind(n, state) == IR for n in part):
        for n in part:
            problems.setdefault(n, "nothing to compute around it")
    return problems


def one_sym_size_per_user(gm) -> bool:
    """Gives every aten.sym_size node one user, so that a size read by views in two
    delegates (or in one and on ExecuTorch) is computed in each, never passed between
    them. Run before partitioning (gearbox.to_edge_transform_and_lower does); returns
    whether the graph changed."""
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if op_key(node.target) != "aten.sym_size.int" or len(node.users) < 2:
            continue
        for user in list(node.users)[1:]:
            with graph.inserting_before(user):
                twin = graph.call_function(node.target, node.args, node.kwargs)
            twin.meta = dict(node.meta)
            user.replace_input_with(node, twin)
            changed = True
    if changed:
        gm.recompile()
    return changed


def plan_partitions(program, claim: Optional[Callable[[Node], bool]] = None) -> Plan:
    """Partitions of `program` (an edge-dialect ExportedProgram) for gearbox, and the report."""
    gm = program.graph_module
    state = ProgramState(program)
    verdicts: Dict[Node, Optional[str]] = {}
    for node in gm.graph.nodes:
        if not _counted(node) or "delegation_tag" in node.meta:
            continue
        if claim is not None and not claim(node):
            verdicts[node] = _NOT_CLAIMED
            continue
        verdicts[node] = supported(node, state)

    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    partitions: List[List[Node]] = []
    for _ in range(_MAX_ROUNDS):
        proposed = CapabilityBasedPartitioner(gm, _Support(verdicts), allows_single_node_partition=True)
        partitions = [sorted(p.nodes, key=order.__getitem__) for p in proposed.propose_partitions()]
        problems = {}
        for part in partitions:
            problems.update(_boundary_problems(part, state, verdicts))
        if not problems:
            break
        verdicts.update(problems)
    else:
        partitions = []

    report = DelegationReport(delegates=len(partitions))
    meta = gm.meta.get("gearbox_rewrites") or {}
    report.rewrites = dict(meta.get("done", {}))
    report.misses = list(meta.get("misses", []))
    taken = {n for p in partitions for n in p}
    for node, reason in verdicts.items():
        if reason == _NOT_CLAIMED:
            continue  # another partitioner's
        bookkeeping = _is_bookkeeping(node)
        if not bookkeeping:
            report.compute += 1
            if node in taken:
                report.delegated += 1
        if node not in taken:
            table = report.bookkeeping if bookkeeping else report.left
            entry = table.setdefault(op_key(node.target) or str(node.target), [0, set()])
            entry[0] += 1
            entry[1].add(reason or "outside every delegate")

    cache_rows: Dict[int, int] = {}
    for i, part in enumerate(partitions):
        rows = {int(tensor_val(a).shape[2]) for n in part for a in n.all_input_nodes
                if state.is_mutable_buffer(a) and converter_for(n, state).kind == STATE}
        if len(rows) > 1:
            raise ValueError(f"KV caches of different lengths {sorted(rows)} in one delegate")
        if rows:
            cache_rows[i] = rows.pop()
    return Plan(partitions, cache_rows, report)


__all__ = ["KEEP_WHOLE", "DelegationReport", "Plan", "plan_partitions", "one_sym_size_per_user"]
