"""Exports a Gemma-3 written with gearbox ops to an ExecuTorch .pte delegated to gearbox.

    python -m gearbox.export -o mini.pte                       # mini config, method forward
    python -m gearbox.export -o m.pte --weights DIR            # a Hugging Face checkpoint
    python -m gearbox.export -o m.pte --methods prefill,decode # two methods, one engine

`forward` has a dynamic sequence over every profile and picks automatically; `prefill`
(default profile "prefill") and `decode` (seq 1, default profile "decode") share one
engine and one execution context, so decode continues the sequence prefill started.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Dict, List, Optional, Sequence

import torch

from gearbox.gemma3 import Gemma3
from gearbox.partitioner import GearboxPartitioner, Profile


def default_profiles(max_seq: int) -> List[Profile]:
    """decode [1, 1, 1] then prefill [1, min(128, max), max], as `gearbox build`."""
    return [Profile("decode", 1, 1, 1), Profile("prefill", 1, min(128, max_seq), max_seq)]


def export_program(model: Gemma3, profiles: Sequence[Profile], methods: Sequence[str] = ("forward",),
                   device: str = "auto"):
    """An ExecutorchProgramManager for `model` with the given methods (forward, prefill, decode)."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    for m in methods:
        if m not in ("forward", "prefill", "decode"):
            raise ValueError(f"unknown method {m!r}: forward, prefill or decode")
    names = [p.name for p in profiles]
    lo, hi = min(p.min for p in profiles), max(p.max for p in profiles)
    context = f"gearbox-{uuid.uuid4()}" if len(methods) > 1 else None
    programs: Dict[str, torch.export.ExportedProgram] = {}
    partitioners: Dict[str, list] = {}
    model.eval()
    for m in methods:
        if m == "decode":
            if "decode" not in names:
                raise ValueError("method decode needs a profile named decode")
            args = (torch.tensor([[1]]), torch.tensor([[0]]))
            dynamic = None
            default = "decode"
        else:
            n = max(2, min(hi, 8))
            args = (torch.ones(1, n, dtype=torch.long), torch.arange(n).unsqueeze(0))
            seq = torch.export.Dim("seq", min=lo, max=hi)
            dynamic = ({1: seq}, {1: seq})
            default = "automatic" if m == "forward" else ("prefill" if "prefill" in names else "automatic")
        with torch.no_grad():
            programs[m] = torch.export.export(model, args, dynamic_shapes=dynamic, strict=False)
        partitioners[m] = [GearboxPartitioner(profiles, default_profile=default, max_context=model.config.max_context,
                                              context=context, device=device, metadata=model.metadata())]
    model.reset()
    return to_edge_transform_and_lower(programs, partitioner=partitioners,
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()


def parse_profile(text: str) -> Profile:
    parts = text.split(":")
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"--profile {text!r}: expected NAME:MIN:OPT:MAX")
    try:
        return Profile(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--profile {text!r}: {e}") from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gearbox.export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, help="the .pte to write")
    p.add_argument("--weights", help="a Hugging Face Gemma-3 checkpoint directory (default: the mini config)")
    p.add_argument("--seed", type=int, default=1, help="seed of the mini model's random weights")
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], help="weight dtype (default: the checkpoint's; f32 mini)")
    p.add_argument("--max-seq", type=int, default=512, help="maximum context, the KV cache length")
    p.add_argument("--profile", type=parse_profile, action="append",
                   help="NAME:MIN:OPT:MAX over the sequence, repeatable (default decode:1:1:1 prefill:1:128:MAX)")
    p.add_argument("--methods", default="forward", help="forward, or prefill,decode")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="the device at run time")
    p.add_argument("--all-logits", action="store_true", help="logits for every position, not just the last")
    a = p.parse_args(argv)
    if a.max_seq < 1:
        p.error("--max-seq must be >= 1")
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}.get(a.dtype)
    profiles = a.profile or default_profiles(a.max_seq)
    if max(pr.max for pr in profiles) > a.max_seq:
        p.error("a profile's max is above --max-seq")
    try:
        if a.weights:
            model = Gemma3.from_hf(a.weights, max_context=a.max_seq, dtype=dtype, all_logits=a.all_logits)
        else:
            model = Gemma3.mini(seed=a.seed, max_context=a.max_seq, dtype=dtype or torch.float32,
                                all_logits=a.all_logits)
        program = export_program(model, profiles, [m.strip() for m in a.methods.split(",")], a.device)
    except (ValueError, KeyError, FileNotFoundError, RuntimeError) as e:
        print(f"gearbox.export: {e}", file=sys.stderr)
        return 1
    with open(a.output, "wb") as f:
        program.write_to_file(f)
    print(f"wrote {a.output}: methods {a.methods}, profiles "
          + ", ".join(f"{pr.name}[{pr.min},{pr.opt},{pr.max}]" for pr in profiles), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
