"""GearboxPartitioner and the GearboxBackend preprocess for ExecuTorch.

    from gearbox.partitioner import GearboxPartitioner, Profile, to_edge_transform_and_lower

    seq = torch.export.Dim("seq", min=1, max=512)
    ep = torch.export.export(model, (tokens, positions), dynamic_shapes=({1: seq}, {1: seq}))
    partitioner = GearboxPartitioner(profiles=[Profile("decode", 1, 1, 1), Profile("prefill", 1, 128, 512)],
                                     default_profile="automatic")
    pte = to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch()

to_edge_transform_and_lower runs gearbox's pattern rewrites (gearbox.patterns) before
ExecuTorch partitions. The partitioner claims what the converter registry accepts
(gearbox.converters) in convex partitions, each one delegate (gearbox.capability), and
prints what it delegated and why the rest was not; preprocess lowers each partition to
gearbox's network description and builds the engine whose bytes become the delegate blob.
The exported `Dim` must span the union of the profiles, and the program has at most one
dynamic extent (every dynamic dim of its inputs is that one `Dim`): the profiles bound it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Callable, Dict, List, Optional, Sequence

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data, tag_mutated_buffer

from gearbox import backend_id as ids
from gearbox import lowering
from gearbox.capability import KEEP_WHOLE, DelegationReport, plan_partitions


@dataclasses.dataclass(frozen=True)
class Profile:
    """An optimization profile over the sequence length: min <= opt <= max."""

    name: str
    min: int
    opt: int
    max: int

    def __post_init__(self):
        if not self.name or ":" in self.name:
            raise ValueError(f"profile name {self.name!r} must be non-empty and without ':'")
        if not 1 <= self.min <= self.opt <= self.max:
            raise ValueError(f"profile {self.name}: need 1 <= min <= opt <= max, got {self.min}, {self.opt}, {self.max}")


def _request_spec(default_profile) -> Optional[str]:
    if default_profile is None:
        return None
    if default_profile == "automatic":
        return "automatic"
    if isinstance(default_profile, bool):
        raise TypeError("default_profile cannot be a bool")
    if isinstance(default_profile, int):
        if default_profile < 0:
            raise ValueError("default_profile index must be >= 0")
        return f"index:{default_profile}"
    if isinstance(default_profile, str) and default_profile:
        return f"name:{default_profile}"
    raise TypeError(f"default_profile must be None, 'automatic', an index or a profile name, not {default_profile!r}")


class GearboxPartitioner(Partitioner):
    """Delegates the gearbox ops of a program to one gearbox engine.

    profiles: the engine's optimization profiles, in index order (names must be unique).
    default_profile: the request of calls made without a guard: None (profile 0, the
        TensorRT rule), "automatic", an index, or a profile name.
    max_context: the KV cache length (default: the largest profile max).
    context: a key shared by methods that continue one sequence (prefill + decode): their
        delegate handles share one execution context (KV cache) at run time.
    device: the device at run time, "auto" (CUDA when present), "cpu" or "cuda".
    build_device: the device the tactics are timed on at export ("cpu" here; an engine
        loaded on another device tunes there on first load).
    metadata: string pairs stored in the engine (e.g. Gemma3.metadata(): vocab, tokens).
    claim: which nodes this partitioner may take (default: all it can run); e.g. those of
        one submodule, so that two partitioners give one method two engines.
    report: print what was delegated, and why the rest was not, to stderr.
    require_full: raise IncompleteDelegationError when compute stays on ExecuTorch.
    """

    def __init__(self, profiles: Sequence[Profile], default_profile=None, max_context: Optional[int] = None,
                 context: Optional[str] = None, device: str = "auto", build_device: str = "cpu",
                 metadata: Optional[Dict[str, str]] = None, claim: Optional[Callable] = None,
                 report: bool = True, require_full: bool = False):
        super().__init__()
        profiles = [p if isinstance(p, Profile) else Profile(*p) for p in profiles]
        if not profiles:
            raise ValueError("at least one profile is needed")
        names = [p.name for p in profiles]
        if len(set(names)) != len(names):
            raise ValueError(f"profile names must be unique: {names}")
        request = _request_spec(default_profile)
        if request and request.startswith("name:") and request[5:] not in names:
            raise ValueError(f"default_profile {default_profile!r} is not one of {names}")
        if request and request.startswith("index:") and int(request[6:]) >= len(profiles):
            raise ValueError(f"default_profile index {default_profile} is past the {len(profiles)} profiles")
        if device not in ("auto", "cpu", "cuda") or build_device not in ("cpu", "cuda"):
            raise ValueError("device must be auto, cpu or cuda; build_device cpu or cuda")
        self.profiles = profiles
        self.claim = claim
        self.report = report
        self.require_full = require_full
        self.last_report: Optional[DelegationReport] = None
        self._partitioned = False
        self._next_tag = 0
        self._max_context_given = max_context is not None
        self.max_context = max_context or max(p.max for p in profiles)
        if self.max_context < max(p.max for p in profiles):
            raise ValueError(f"max_context {self.max_context} is below the largest profile max")
        specs = [CompileSpec(ids.SPEC_BUILD_PROFILES, json.dumps([[p.name, p.min, p.opt, p.max] for p in profiles]).encode()),
                 CompileSpec(ids.SPEC_BUILD_DEVICE, build_device.encode()),
                 CompileSpec(ids.SPEC_BUILD_PREFIX + "max_context", str(self.max_context).encode()),
                 CompileSpec(ids.SPEC_BUILD_PREFIX + "metadata", json.dumps(metadata or {}).encode()),
                 CompileSpec(ids.SPEC_DEVICE, device.encode())]
        if request:
            specs.append(CompileSpec(ids.SPEC_DEFAULT_PROFILE, request.encode()))
        if context:
            specs.append(CompileSpec(ids.SPEC_CONTEXT, context.encode()))
        self.delegation_spec = DelegationSpec(ids.BACKEND_ID, specs)

    @property
    def seq_range(self):
        """(min, max) of the sequence over the union of the profiles: the exported Dim."""
        return min(p.min for p in self.profiles), max(p.max for p in self.profiles)

    def ops_to_not_decompose(self, ep):
        """linear, SDPA, SiLU and GELU reach the rewrites and converters whole. Asked again
        after partition() (ExecuTorch's check that kept ops were delegated), it accepts what
        stays on ExecuTorch undecomposed: the report names it."""
        return list(KEEP_WHOLE), (lambda node: False) if self._partitioned else None

    def partition(self, exported_program) -> PartitionResult:
        self._partitioned = True
        check_profiles(exported_program, self.profiles, edge=True)
        plan = plan_partitions(exported_program, self.claim)
        tags: Dict[str, DelegationSpec] = {}
        for i, part in enumerate(plan.partitions):
            tag = f"gearbox_{self._next_tag + i}"
            for node in part:
                node.meta["delegation_tag"] = tag
            tags[tag] = DelegationSpec(ids.BACKEND_ID, self._specs(plan.cache_rows.get(i)))
        self._next_tag += len(plan.partitions)
        if tags:
            tag_constant_data(exported_program)
            tag_mutated_buffer(exported_program)
        self.last_report = plan.report
        if self.require_full and plan.report.left_compute:
            raise IncompleteDelegationError(plan.report.text())
        if self.report:
            print(plan.report.text(), file=sys.stderr)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)

    def _specs(self, cache_rows: Optional[int]) -> List[CompileSpec]:
        max_context = self.max_context
        if cache_rows is not None:
            if self._max_context_given and self.max_context != cache_rows:
                raise ValueError(f"max_context {self.max_context} differs from the model's KV cache of {cache_rows} "
                                 "rows (export the model with max_cache_len = max_context)")
            max_context = cache_rows
        if max_context < max(p.max for p in self.profiles):
            raise ValueError(f"the context of {max_context} rows is below the largest profile max "
                             f"{max(p.max for p in self.profiles)}")
        specs = [s for s in self.delegation_spec.compile_specs if s.key != ids.SPEC_BUILD_PREFIX + "max_context"]
        return specs + [CompileSpec(ids.SPEC_BUILD_PREFIX + "max_context", str(max_context).encode())]


def _dim_label(sym) -> str:
    """"Dim 'seq' (s27)" for the symbol torch.export made for Dim("seq")."""
    from gearbox.fx_util import dim_name

    name = dim_name(sym)
    return f"Dim '{name}' ({sym})" if name != str(sym) else f"dynamic dim {sym}"


def dynamic_dims(program) -> Dict[str, tuple]:
    """The dynamic extents of a program's user inputs: symbol -> (label, min, max, where)."""
    import torch

    user = set(program.graph_signature.user_inputs)
    found: Dict[str, tuple] = {}
    for node in program.graph_module.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        v = node.meta.get("val")
        if not isinstance(v, torch.Tensor):
            continue
        for d, e in enumerate(v.shape):
            if isinstance(e, torch.SymInt) and str(e) not in found:
                exprs = e.node.expr.free_symbols
                for sym in exprs:
                    r = program.range_constraints.get(sym)
                    lo = int(r.lower) if r is not None and r.lower.is_finite else 0
                    hi = int(r.upper) if r is not None and r.upper.is_finite else None
                    found.setdefault(str(sym), (_dim_label(e) if e.node.expr == sym else f"dynamic dim {sym}", lo, hi,
                                                f"input '{node.name}' dim {d}"))
    return found


def check_profiles(program, profiles: Sequence[Profile], edge: bool = False) -> None:
    """Raises ValueError when the program has several dynamic extents, or a profile
    reaches outside the range its dynamic extent was exported with. An edge program
    reports a Dim of min 1 as min 2 (torch's 0/1 specialization): `edge` reads 2 as 1."""
    dims = dynamic_dims(program)
    if len(dims) > 1:
        listed = "; ".join(f"{label} [{lo}, {hi}] at {where}" for label, lo, hi, where in dims.values())
        raise ValueError(f"the program has {len(dims)} dynamic extents ({listed}); gearbox supports one dynamic "
                         "extent per program (its profiles bound it): export the others as static")
    for label, lo, hi, _ in dims.values():
        lo = 1 if edge and lo == 2 else lo
        for p in profiles:
            if p.min < lo or (hi is not None and p.max > hi):
                raise ValueError(f"profile '{p.name}' [{p.min}, {p.max}] reaches outside the exported {label} range "
                                 f"[{lo}, {hi}]: export the Dim with min <= {p.min} and max >= {p.max}, or narrow "
                                 "the profile")


class IncompleteDelegationError(RuntimeError):
    """require_full=True and part of the program's compute stays on ExecuTorch."""


def _spec(compile_specs: List[CompileSpec], key: str, default=None) -> Optional[str]:
    for s in compile_specs:
        if s.key == key:
            return bytes(s.value).decode()
    return default


class GearboxBackend(BackendDetails):
    """preprocess: the claimed subgraph -> network description -> `gearbox build` -> the
    engine file bytes (the delegate blob)."""

    @staticmethod
    def preprocess(edge_program, compile_specs: List[CompileSpec]) -> PreprocessResult:
        profiles = [tuple(p) for p in json.loads(_spec(compile_specs, ids.SPEC_BUILD_PROFILES))]
        max_context = int(_spec(compile_specs, ids.SPEC_BUILD_PREFIX + "max_context"))
        device = _spec(compile_specs, ids.SPEC_BUILD_DEVICE, "cpu")
        metadata = json.loads(_spec(compile_specs, ids.SPEC_BUILD_PREFIX + "metadata", "{}"))
        desc, weights = lowering.describe(edge_program, max_context, metadata)
        return PreprocessResult(processed_bytes=lowering.build_engine(desc, weights, profiles, device))


assert GearboxBackend.__name__ == ids.BACKEND_ID


def to_edge_transform_and_lower(programs, partitioner, transform_passes=(), compile_config=None, **kwargs):
    """ExecuTorch's to_edge_transform_and_lower with gearbox's pattern rewrites run first
    (gearbox.patterns.GearboxRewritePass), an edge config that admits gearbox ops, and the
    ops kept whole for gearbox but left on ExecuTorch decomposed for its portable kernels
    (gearbox.leftovers). Arguments as ExecuTorch's; returns its EdgeProgramManager."""
    from executorch.exir import EdgeCompileConfig
    from executorch.exir import to_edge_transform_and_lower as et_lower

    from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult

    from gearbox.capability import one_sym_size_per_user
    from gearbox.leftovers import decompose_leftovers
    from gearbox.patterns import GearboxRewritePass

    class OneSymSizePerUser(ExportedProgramPassBase):
        def call(self, exported_program) -> ExportedProgramPassResult:
            return ExportedProgramPassResult(exported_program, one_sym_size_per_user(exported_program.graph_module))

    for program in (programs.values() if isinstance(programs, dict) else [programs]):
        for p in (partitioner if isinstance(partitioner, (list, tuple)) else []):
            if isinstance(p, GearboxPartitioner):
                check_profiles(program, p.profiles)
    manager = et_lower(programs, transform_passes=[GearboxRewritePass(), OneSymSizePerUser(), *transform_passes],
                       partitioner=partitioner,
                       compile_config=compile_config or EdgeCompileConfig(_check_ir_validity=False), **kwargs)
    for name in manager.methods:
        program = manager.exported_program(name)
        orphans = [n.name for n in program.graph_module.graph.nodes if lowering.gearbox_op_name(n.target)]
        if orphans:
            raise lowering.LoweringError(
                f"method {name}: gearbox ops outside every delegate have no ExecuTorch kernel: {', '.join(orphans)} "
                "(the partitioner's report says why they were not delegated)")
        stuck = decompose_leftovers(program)
        if stuck:
            print(f"gearbox: method {name}: no portable form for {', '.join(stuck)} left on ExecuTorch",
                  file=sys.stderr)
    return manager
