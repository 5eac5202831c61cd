#!/usr/bin/env python3
"""Exports programs of plain aten ops (no gearbox op, no pattern) for generic_delegate_test:
the SDPA block with a bool mask input and the encoder layer of generic_models.py, each one
delegate with two profiles, and generic_reference.json with eager PyTorch's outputs at a
length in each profile.

    make_generic_programs.py OUT_DIR   (needs $GEARBOX_CLI)
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

import generic_models as gm  # noqa: E402
from gearbox.partitioner import GearboxPartitioner, Profile, to_edge_transform_and_lower  # noqa: E402

PROFILES = [Profile("short", 1, 2, 4), Profile("long", 5, 8, gm.MAX_SEQ)]
LENGTHS = (3, 9)


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    reference = {}
    for name in ("masked", "encoder"):
        torch.manual_seed(0)
        model = gm.MODELS[name]().eval()
        partitioner = GearboxPartitioner(PROFILES, default_profile="automatic", device="cpu")
        program = to_edge_transform_and_lower(gm.export(name, model), partitioner=[partitioner]).to_executorch()
        report = partitioner.last_report
        if report.left_compute or report.delegates != 1:
            sys.exit(f"{name}: {report.text()}")
        with open(os.path.join(out_dir, f"{name}.pte"), "wb") as f:
            f.write(program.buffer)
        cases = []
        for t in LENGTHS:
            args = gm.inputs(name, t)
            with torch.no_grad():
                want = model(*args)
            cases.append({"length": t, "x": args[0].flatten().tolist(),
                          "mask": args[1].flatten().int().tolist() if len(args) > 1 else [],
                          "shape": list(want.shape), "want": want.flatten().tolist()})
        reference[name] = cases
    with open(os.path.join(out_dir, "generic_reference.json"), "w") as f:
        json.dump(reference, f)
    print(f"wrote {', '.join(reference)} to {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1])
