"""Lowers a delegate's graph (gearbox ops and the aten ops gearbox.converters accepts) to
gearbox's network description (JSON, see
docs/FORMAT.md "Network description") plus its weights, and builds the engine with the
`gearbox` CLI (`gearbox build --network --weights`), which validates, tunes per profile and
writes the engine file: the delegate blob.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import shutil
import subprocess
import tempfile
from typing import Dict, List, Sequence, Tuple

import torch

from gearbox.converters import IR, TORCH_TO_DTYPE, LoweringError, NetworkBuilder, choose, gearbox_op_name
from gearbox.fx_util import ProgramState, dim_name

__all__ = ["LoweringError", "gearbox_op_name", "describe", "build_engine", "find_cli"]


def _input_spec(node: torch.fx.Node, symbols: Dict[str, str], static_program: bool) -> dict:
    """The network description's entry for a delegate input: dynamic extents -1, named by
    their Dim (all of them one Dim: the profiles bound one dynamic extent). A [1, T] input
    of token ids or positions is [1, -1] ("batch", "seq") also in a program of fixed
    length (a decode method), so that methods exported at different lengths describe, and
    share, one engine."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype not in TORCH_TO_DTYPE:
        raise LoweringError(f"input '{node.name}' must be a tensor of {sorted(TORCH_TO_DTYPE.values())}")
    if val.dim() == 2 and isinstance(val.shape[0], int) and val.shape[0] == 1 and \
            (static_program and val.dtype in (torch.int32, torch.int64) or not isinstance(val.shape[1], int)):
        if not isinstance(val.shape[1], int):
            _input_spec_dims(node, val.shape, symbols)
        return {"name": node.name, "dtype": TORCH_TO_DTYPE[val.dtype], "dims": [1, -1], "dim_names": ["batch", "seq"]}
    dims, names = _input_spec_dims(node, val.shape, symbols)
    return {"name": node.name, "dtype": TORCH_TO_DTYPE[val.dtype], "dims": dims, "dim_names": names}


def _input_spec_dims(node: torch.fx.Node, shape, symbols: Dict[str, str]):
    dims, names = [], []
    for d, e in enumerate(shape):
        if isinstance(e, int):
            dims.append(int(e))
            names.append(f"d{d}")
            continue
        if not (isinstance(e, torch.SymInt) and e.node.expr.is_Symbol):
            raise LoweringError(f"input '{node.name}' dim {d} is {e}, not a number or the dynamic dim itself")
        symbols.setdefault(str(e), node.name)
        if len(symbols) > 1:
            raise LoweringError(f"input '{node.name}' dim {d} is {e}, another dynamic extent than "
                                f"{next(iter(symbols))} of input '{next(iter(symbols.values()))}': gearbox supports "
                                "one dynamic extent per program (its profiles bound it)")
        dims.append(-1)
        names.append(dim_name(e))
    return dims, names


def describe(program, max_context: int, metadata: Dict[str, str] | None = None) -> Tuple[dict, Dict[str, torch.Tensor]]:
    """(network description, weights by name) for a delegate's ExportedProgram: gearbox
    ops and the aten ops the converter registry accepts (gearbox.converters)."""
    state = ProgramState(program)
    nb = NetworkBuilder(state, max_context, metadata)
    user_outputs = set(program.graph_signature.user_outputs)
    symbols: Dict[str, str] = {}
    static_program = not any(isinstance(e, torch.SymInt) for n in program.graph_module.graph.nodes
                             if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
                             for e in n.meta["val"].shape)
    for node in program.graph_module.graph.nodes:
        if node.op == "placeholder":
            if state.target(node) is not None:
                continue  # weights are named by the nodes that read them; caches are state
            nb.desc["inputs"].append(_input_spec(node, symbols, static_program))
            nb.names[node] = node.name
            nb.dtypes[node.name] = node.meta["val"].dtype
        elif node.op == "call_function":
            if node.target is operator.getitem:
                if node not in nb.names:
                    raise LoweringError(f"node '{node.name}': a piece of '{node.args[0]}' gearbox does not compute")
                continue
            conv, reason = choose(node, state)
            if conv is None:
                raise LoweringError(f"node '{node.name}' ({node.target}): {reason}")
            if conv.kind == IR:
                conv.emit(node, nb)
            # ALIAS nodes read through to their IR tensor (NetworkBuilder.tensor); STATE
            # nodes are the KV cache writes the attention op performs itself; SIZE nodes
            # are shape queries the views read from their own shapes.
        elif node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            inputs = {i["name"] for i in nb.desc["inputs"]}
            for o in outs:
                if isinstance(o, torch.fx.Node) and o.name in user_outputs:
                    name = nb.tensor(o, "output")
                    if name in inputs or name in nb.desc["outputs"]:
                        # An input handed back, or one tensor twice: a copy of its own.
                        rank = len(o.meta["val"].shape)
                        name = nb.emit("reshape", f"{o.name}.out", [name], nb.dtype_of(name),
                                       attrs={"shape": [-(d + 2) for d in range(rank)]})
                    nb.desc["outputs"].append(name)
        else:
            raise LoweringError(f"node '{node.name}': {node.op} nodes are not supported")
    if not nb.desc["outputs"]:
        raise LoweringError("the delegate has no outputs gearbox computes")
    desc = nb.desc
    _rename_single_output(desc, "logits")
    _fuse_linears(desc)
    return desc, nb.weights


def _rename_single_output(desc: dict, new: str) -> None:
    if len(desc["outputs"]) != 1:
        return
    old = desc["outputs"][0]
    for n in desc["nodes"]:
        n["inputs"] = [new if t == old else t for t in n["inputs"]]
        n["outputs"] = [new if t == old else t for t in n["outputs"]]
    desc["outputs"] = [new]


def _fuse_linears(desc: dict) -> None:
    """Linears without bias that read the same activation become one multi-output linear
    (fused QKV, gate/up): one pass over the activation instead of several."""
    groups: Dict[str, List[dict]] = {}
    for n in desc["nodes"]:
        if n["op"] == "linear" and "attrs" not in n:
            groups.setdefault(n["inputs"][0], []).append(n)
    fused_away = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        head = members[0]
        head["name"] = "+".join(m["name"] for m in members)
        head["outputs"] = [m["outputs"][0] for m in members]
        head["weights"] = [m["weights"][0] for m in members]
        fused_away.update(id(m) for m in members[1:])
    desc["nodes"] = [n for n in desc["nodes"] if id(n) not in fused_away]


def find_cli() -> str:
    """The gearbox CLI: $GEARBOX_CLI, else `gearbox` on PATH, else a build in this repo."""
    env = os.environ.get("GEARBOX_CLI")
    if env:
        return env
    on_path = shutil.which("gearbox")
    if on_path:
        return on_path
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for build in ("release", "ci", "dev"):
        candidate = os.path.join(repo, "build", build, "tools", "gearbox")
        if os.path.exists(candidate):
            return candidate
    raise FileNotFoundError("the gearbox CLI was not found: set GEARBOX_CLI or put `gearbox` on PATH")


_ENGINES: Dict[str, bytes] = {}


def build_engine(desc: dict, weights: Dict[str, torch.Tensor], profiles: Sequence[Tuple[str, int, int, int]],
                 device: str = "cpu") -> bytes:
    """The engine file's bytes. Memoized on (description, weights, profiles, device), so the
    methods of one export that lower the same network get identical blobs (and share one
    engine at run time)."""
    from safetensors.torch import save_file

    text = json.dumps(desc, sort_keys=True)
    h = hashlib.sha256(text.encode())
    h.update(json.dumps([list(p) for p in profiles]).encode())
    h.update(device.encode())
    for name in sorted(weights):
        t = weights[name].detach().contiguous().cpu()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    key = h.hexdigest()
    if key in _ENGINES:
        return _ENGINES[key]
    with tempfile.TemporaryDirectory(prefix="gearbox-export-") as tmp:
        net_path = os.path.join(tmp, "network.json")
        weights_path = os.path.join(tmp, "weights.safetensors")
        engine_path = os.path.join(tmp, "engine.gbx")
        with open(net_path, "w") as f:
            f.write(text)
        save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, weights_path)
        cmd = [find_cli(), "build", "--network", net_path, "--weights", weights_path, "-o", engine_path,
               "--device", device]
        for name, lo, opt, hi in profiles:
            cmd += ["--profile", f"{name}:{lo}:{opt}:{hi}"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"gearbox build failed ({' '.join(cmd)}):\n{out.stderr.strip()}")
        with open(engine_path, "rb") as f:
            blob = f.read()
    _ENGINES[key] = blob
    return blob
