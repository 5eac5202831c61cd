#!/usr/bin/env python3
"""Writes the .pte programs and eager-PyTorch references the delegate tests use:

  mini.pte         method forward: profiles decode [1,1,1], prefill [1,16,32]; automatic
  mini_pd.pte      methods prefill + decode sharing one engine and one context
  two_engines.pte  method forward with two engines: A lists [decode, prefill], B lists
                   [prefill, decode] (an index means different regimes in each)
  reference.json   eager logits for the scenarios the tests run

usage: make_test_programs.py OUTDIR [--dtype f32|bf16]   (GEARBOX_CLI names the gearbox CLI)
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower  # noqa: E402

from gearbox.export import export_program  # noqa: E402
from gearbox.gemma3 import Gemma3  # noqa: E402
from gearbox.partitioner import GearboxPartitioner, Profile  # noqa: E402

MAX_CONTEXT = 64
PROFILES = [Profile("decode", 1, 1, 1), Profile("prefill", 1, 16, 32)]
PROMPT = [2, 651, 1974, 563, 1000]
NEXT = [77, 1500]


def eager_logits(model, steps):
    """Logits of each call of `steps` [(ids, start)], one sequence."""
    model.reset()
    out = []
    with torch.no_grad():
        for ids, start in steps:
            t = torch.tensor([ids])
            p = torch.arange(start, start + len(ids)).unsqueeze(0)
            out.append(model(t, p).flatten().tolist())
    model.reset()
    return out


class TwoEngines(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.a = Gemma3.mini(seed=1, max_context=MAX_CONTEXT, dtype=dtype)
        self.b = Gemma3.mini(seed=2, max_context=MAX_CONTEXT, dtype=dtype)

    def forward(self, tokens, positions):
        return self.a(tokens, positions), self.b(tokens, positions)


def in_submodule(name):
    def claim(node):
        return any(path == name for path, _ in node.meta.get("nn_module_stack", {}).values())
    return claim


def main():
    out_dir = sys.argv[1]
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[sys.argv[3] if len(sys.argv) > 3 else "f32"]
    os.makedirs(out_dir, exist_ok=True)
    model = Gemma3.mini(seed=1, max_context=MAX_CONTEXT, dtype=dtype)
    steps = [(PROMPT, 0), ([NEXT[0]], len(PROMPT)), ([NEXT[1]], len(PROMPT) + 1)]
    reference = {"prompt": PROMPT, "next": NEXT, "vocab": model.config.vocab, "mini": eager_logits(model, steps)}

    for name, methods in (("mini.pte", ["forward"]), ("mini_pd.pte", ["prefill", "decode"])):
        with open(os.path.join(out_dir, name), "wb") as f:
            export_program(model, PROFILES, methods, device="auto").write_to_file(f)

    two = TwoEngines(dtype).eval()
    seq = torch.export.Dim("seq", min=1, max=32)
    args = (torch.ones(1, 4, dtype=torch.long), torch.arange(4).unsqueeze(0))
    with torch.no_grad():
        ep = torch.export.export(two, args, dynamic_shapes=({1: seq}, {1: seq}), strict=False)
    a = GearboxPartitioner(PROFILES, default_profile="automatic", max_context=MAX_CONTEXT, claim=in_submodule("a"))
    b = GearboxPartitioner(list(reversed(PROFILES)), default_profile="automatic", max_context=MAX_CONTEXT,
                           claim=in_submodule("b"))
    program = to_edge_transform_and_lower(ep, partitioner=[a, b],
                                          compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
    with open(os.path.join(out_dir, "two_engines.pte"), "wb") as f:
        program.write_to_file(f)
    reference["two_engines_a"] = eager_logits(two.a, [([NEXT[0]], 0)])[0]
    reference["two_engines_b"] = eager_logits(two.b, [([NEXT[0]], 0)])[0]
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f)
    print(f"wrote mini.pte, mini_pd.pte, two_engines.pte, reference.json to {out_dir}")


if __name__ == "__main__":
    main()
