#!/usr/bin/env python3
"""The delegate under ExecuTorch's Python runtime (executorch.runtime), with
libgearbox_executorch loaded into the process ($GEARBOX_ET_LIB):

1. mini.pte (from make_test_programs.py) against eager PyTorch (reference.json);
2. a committed HF checkpoint (--parity DIR, e.g. tests/data/parity/window_4x) loaded into
   transformers' own class and exported with all-position logits, as
   `python -m gearbox.export --weights DIR --all-logits` does: teacher-forced log-probs of
   the .pte against those transformers recorded (expected.json, fp32) within 1e-4, and
   transformers' eager model in this environment against them too.
Prints "python runtime ok" on success.
"""
import argparse
import ctypes
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
ctypes.CDLL(os.environ["GEARBOX_ET_LIB"], mode=ctypes.RTLD_GLOBAL)  # registers GearboxBackend

from executorch.runtime import Runtime  # noqa: E402

from gearbox import BACKEND_ID  # noqa: E402
from gearbox.export import DecoderLM, export_program, load_model  # noqa: E402
from gearbox.partitioner import Profile  # noqa: E402


def check(cond, message):
    if not cond:
        sys.exit(f"FAILED: {message}")
    print(f"ok: {message}")


def run(method, ids, start):
    t = torch.tensor([ids], dtype=torch.long)
    p = torch.arange(start, start + len(ids), dtype=torch.long).unsqueeze(0)
    return method.execute([t, p])[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parity", required=True)
    args = ap.parse_args()
    runtime = Runtime.get()
    check(BACKEND_ID in runtime.backend_registry.registered_backend_names, f"{BACKEND_ID} is registered")

    programs = os.environ["GEARBOX_TEST_PROGRAMS"]
    ref = json.load(open(os.path.join(programs, "reference.json")))
    forward = runtime.load_program(os.path.join(programs, "mini.pte")).load_method("forward")
    prompt, nxt = ref["prompt"], ref["next"]
    got = [run(forward, prompt, 0), run(forward, [nxt[0]], len(prompt)), run(forward, [nxt[1]], len(prompt) + 1)]
    for i, g in enumerate(got):
        want = torch.tensor(ref["mini"][i])
        err = ((g.flatten() - want).abs().max() / want.abs().max()).item()
        check(err < 2e-5, f"mini.pte call {i} matches eager PyTorch (max rel error {err:.2g})")

    expected = json.load(open(os.path.join(args.parity, "expected.json")))
    ids = expected["prompt_ids"]
    model = load_model(args.parity, dtype=torch.float32)
    with torch.no_grad():
        eager = DecoderLM(model, 64, all_logits=True)(torch.tensor([ids]), torch.arange(len(ids)).unsqueeze(0))[0]
    profiles = [Profile("decode", 1, 1, 1), Profile("prefill", 1, 32, 64)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "parity.pte")
        with open(path, "wb") as f:
            export_program(model, profiles, ["forward"], device="cpu", all_logits=True).write_to_file(f)
        pte = run(runtime.load_program(path).load_method("forward"), ids, 0)[0]
    want = torch.tensor(expected["token_logprobs"])

    def logprobs(logits):
        lp = torch.log_softmax(logits.double(), dim=-1)
        return torch.stack([lp[i - 1, ids[i]] for i in range(1, len(ids))]).float()

    err_pte = (logprobs(pte) - want).abs().max().item()
    err_eager = (logprobs(eager) - want).abs().max().item()
    check(err_eager < 1e-4, f"eager transformers here vs expected.json: max |dlogp| {err_eager:.2g}")
    check(err_pte < 1e-4, f".pte through ExecuTorch's Python runtime vs HF transformers: max |dlogp| {err_pte:.2g}")
    print("python runtime ok")


if __name__ == "__main__":
    main()
