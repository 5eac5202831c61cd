#!/usr/bin/env python3
"""bf16 parity of gearbox with HF transformers on a committed checkpoint (tests/data/parity/).

Builds a bf16 engine (`gearbox build --hf --dtype bf16`: weights rounded to bf16, activations
and accumulation in f32) and scores the checkpoint's reference prompt on the decode and the
prefill paths. The reference is HF transformers in fp32 on the same bf16-rounded weights,
computed here (biases stay f32, as gearbox keeps them): both compute the same function of
the same weights, so every |log p
difference| must be within --tolerance (default 1e-4). HF in bf16 (weights and activations)
is printed beside it: the error a bf16 engine would have, which gearbox's must not exceed.
Needs torch and transformers (the repository's .venv).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    return out.stdout


def hf_logprobs(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits.float()
    logp = torch.log_softmax(logits, dim=-1)[0]
    return [logp[i - 1, ids[i]].item() for i in range(1, len(ids))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gearbox", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--tolerance", type=float, default=1e-4)
    args = p.parse_args()
    ids = json.load(open(os.path.join(args.checkpoint, "expected.json")))["prompt_ids"]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32).eval()
    # The engine's weights: matrices and norm weights rounded to bf16, biases kept in f32
    # (devices add them in f32), Gemma's embedding scale rounded as HF rounds it in bf16.
    with torch.no_grad():
        for name, w in list(model.named_parameters()) + list(model.named_buffers()):
            if w.is_floating_point() and not name.endswith(".bias") and "inv_freq" not in name:
                w.copy_(w.to(torch.bfloat16).float())
    want = hf_logprobs(model, ids)
    hf_bf16 = hf_logprobs(model.to(torch.bfloat16), ids)
    noise = max(abs(a - b) for a, b in zip(want, hf_bf16))
    with tempfile.TemporaryDirectory() as tmp:
        engine = os.path.join(tmp, "bf16.gbx")
        run([args.gearbox, "build", "--hf", args.checkpoint, "-o", engine, "--dtype", "bf16", "--max-seq", "128",
             "--device", args.device])
        score = [args.gearbox, "score", engine, "--prompt-ids", ",".join(map(str, ids)), "--json", "--device",
                 args.device]
        scores = {"decode": json.loads(run(score)), "prefill": json.loads(run(score + ["--prefill"]))}
    err = 0.0
    for path, s in scores.items():
        got = s["token_logprobs"]
        if len(got) != len(want):
            sys.exit(f"FAILED: {len(got)} log-probs on the {path} path, expected {len(want)}")
        e = max(abs(a - b) for a, b in zip(want, got))
        err = max(err, e)
        print(f"log-probs, {path} path: {len(want)} tokens, max |difference| {e:.3g} from HF fp32 on the bf16 "
              f"weights (tolerance {args.tolerance}); HF bf16 itself: {noise:.3g}")
    if err > args.tolerance or err > noise:
        sys.exit("FAILED")
    print("bf16 parity ok")


if __name__ == "__main__":
    main()
