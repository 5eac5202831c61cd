"""Lowers an exported graph of gearbox ops to gearbox's network description (JSON, see
docs/FORMAT.md "Network description") plus its weights, and builds the engine with the
`gearbox` CLI (`gearbox build --network --weights`), which validates, tunes per profile and
writes the engine file: the delegate blob.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from typing import Dict, List, Sequence, Tuple

import torch

_TORCH_TO_DTYPE = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.int32: "i32",
                   torch.int64: "i64"}

# Per op: (tensor inputs, weight args, attrs {IR attr: arg name}).
_OPS = {
    "embedding": (["ids"], ["table"], {"scale": "scale"}),
    "rms_norm": (["x"], ["weight"], {"eps": "eps", "weight_offset": "weight_offset", "head_dim": "head_dim"}),
    "linear": (["x"], ["weight", "bias"], {}),
    "rope": (["x", "positions"], [], {"theta": "theta", "scale": "scale", "heads": "heads", "head_dim": "head_dim"}),
    "attention": (["q", "k", "v", "positions"], [],
                  {"state": "state", "heads": "heads", "kv_heads": "kv_heads", "head_dim": "head_dim",
                   "window": "window", "scale": "scale"}),
    "gelu_tanh_mul": (["gate", "up"], [], {}),
    "silu_mul": (["gate", "up"], [], {}),
    "add": (["a", "b"], [], {}),
    "take_last": (["x"], [], {}),
}


class LoweringError(ValueError):
    """The graph holds something gearbox cannot run; the message names the node."""


def gearbox_op_name(target) -> str | None:
    """'rms_norm' for torch.ops.gearbox.rms_norm(.default) in ATen or edge dialect."""
    name = getattr(target, "_name", None) or getattr(getattr(target, "_op", None), "_name", None) or str(target)
    for sep in ("::", "."):
        prefix = "gearbox" + sep
        if name.startswith(prefix):
            return name[len(prefix):].split(".")[0]
    return None


def _bind_args(node: torch.fx.Node) -> Dict[str, object]:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        raise LoweringError(f"node '{node.name}': {node.target} has no schema")
    bound = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def describe(program, max_context: int, metadata: Dict[str, str] | None = None) -> Tuple[dict, Dict[str, torch.Tensor]]:
    """(network description, weights by name) for an ExportedProgram made of gearbox ops."""
    sig = program.graph_signature
    params = dict(sig.inputs_to_parameters)
    params.update(getattr(sig, "inputs_to_buffers", {}) or {})
    params.update(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
    state = program.state_dict
    constants = getattr(program, "constants", {}) or {}

    def weight_value(name: str) -> torch.Tensor:
        if name in state:
            return state[name]
        if name in constants:
            return constants[name]
        raise LoweringError(f"weight '{name}' has no value in the program")

    desc = {"format": "gearbox-network", "version": 1, "max_context": int(max_context), "inputs": [], "outputs": [],
            "states": [], "nodes": [], "metadata": dict(metadata or {})}
    weights: Dict[str, torch.Tensor] = {}
    names: Dict[torch.fx.Node, str] = {}  # node -> tensor name
    weight_of: Dict[torch.fx.Node, str] = {}  # placeholder -> weight name
    states: Dict[int, dict] = {}
    graph = program.graph_module.graph

    for node in graph.nodes:
        if node.op == "placeholder":
            if node.name in params:
                weight_of[node] = params[node.name]
                continue
            val = node.meta.get("val")
            if val is None or val.dtype not in _TORCH_TO_DTYPE:
                raise LoweringError(f"input '{node.name}' must be a tensor of {sorted(_TORCH_TO_DTYPE.values())}")
            if val.dim() != 2:
                raise LoweringError(f"input '{node.name}' must be [batch, seq], got rank {val.dim()}")
            desc["inputs"].append({"name": node.name, "dtype": _TORCH_TO_DTYPE[val.dtype], "dims": [1, -1],
                                   "dim_names": ["batch", "seq"]})
            names[node] = node.name
        elif node.op == "call_function":
            op = gearbox_op_name(node.target)
            if op not in _OPS:
                raise LoweringError(f"node '{node.name}': {node.target} is not a gearbox op")
            tensor_args, weight_args, attr_args = _OPS[op]
            bound = _bind_args(node)
            entry = {"op": op, "name": node.name, "inputs": [], "outputs": [node.name], "weights": [], "attrs": {}}
            for a in tensor_args:
                src = bound[a]
                if src not in names:
                    raise LoweringError(f"node '{node.name}': argument '{a}' is not an activation")
                entry["inputs"].append(names[src])
            for a in weight_args:
                src = bound.get(a)
                if src is None:
                    continue
                if src not in weight_of:
                    raise LoweringError(f"node '{node.name}': weight '{a}' must be a parameter of the model")
                wname = weight_of[src]
                value = weight_value(wname)
                if value.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                    raise LoweringError(f"weight '{wname}' is {value.dtype}; gearbox reads f32, bf16, f16")
                weights[wname] = value
                entry["weights"].append(wname)
            if op == "linear" and len(entry["weights"]) == 2:
                entry["attrs"]["has_bias"] = 1
            for ir_attr, a in attr_args.items():
                entry["attrs"][ir_attr] = bound[a]
            if op == "attention":
                slot = int(bound["state"])
                width = int(bound["kv_heads"]) * int(bound["head_dim"])
                if slot in states:
                    raise LoweringError(f"node '{node.name}': state slot {slot} is used by two attention nodes")
                states[slot] = {"name": f"{node.name}.kv_cache", "dtype": "f32", "rows": int(max_context),
                                "width": width}
            if not entry["attrs"]:
                del entry["attrs"]
            desc["nodes"].append(entry)
            names[node] = node.name
        elif node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            for o in outs:
                if o not in names:
                    raise LoweringError(f"output '{o}' is not produced by a gearbox op")
                desc["outputs"].append(names[o])
        else:
            raise LoweringError(f"node '{node.name}': {node.op} nodes are not supported")

    if sorted(states) != list(range(len(states))):
        raise LoweringError(f"attention state slots must be 0..{len(states) - 1}, got {sorted(states)}")
    desc["states"] = [states[s] for s in sorted(states)]
    _rename_single_output(desc, "logits")
    _fuse_linears(desc)
    return desc, weights


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
