#!/usr/bin/env python3
"""Parity of gearbox with HF transformers on a committed checkpoint (tests/data/parity/).

Builds an f32 engine from the checkpoint with `gearbox build --hf`, scores the reference
prompt teacher-forced (one token per call, the decode path, and each prefix in one call,
the prefill path) and generates greedily, and compares with expected.json (written by
python/tools/make_parity_checkpoints.py from HF transformers in fp32):
  every |log p difference| <= --tolerance (default 1e-4) on both paths, and the 32 greedy
  ids identical.
Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    return out.stdout


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gearbox", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--tolerance", type=float, default=1e-4)
    args = p.parse_args()
    expected = json.load(open(os.path.join(args.checkpoint, "expected.json")))
    ids = ",".join(map(str, expected["prompt_ids"]))
    with tempfile.TemporaryDirectory() as tmp:
        engine = os.path.join(tmp, "parity.gbx")
        run([args.gearbox, "build", "--hf", args.checkpoint, "-o", engine, "--dtype", "f32", "--max-seq", "128",
             "--device", args.device])
        score_cmd = [args.gearbox, "score", engine, "--prompt-ids", ids, "--json", "--device", args.device]
        scores = {"decode": json.loads(run(score_cmd)), "prefill": json.loads(run(score_cmd + ["--prefill"]))}
        gen = json.loads(run([args.gearbox, "generate", engine, "--prompt-ids", ids, "--max-new-tokens",
                              str(len(expected["greedy_ids"])), "--ignore-eos", "--json", "--device", args.device]))
    want = expected["token_logprobs"]
    err = 0.0
    for path, score in scores.items():
        got = score["token_logprobs"]
        if len(want) != len(got):
            sys.exit(f"FAILED: {len(got)} log-probs on the {path} path, expected {len(want)}")
        worst = max(range(len(want)), key=lambda i: abs(want[i] - got[i]))
        err = max(err, abs(want[worst] - got[worst]))
        print(f"log-probs, {path} path: {len(want)} tokens, max |difference| {abs(want[worst] - got[worst]):.3g} "
              f"at token {worst + 1} (tolerance {args.tolerance})")
    same = gen["generated_ids"] == expected["greedy_ids"]
    print(f"greedy: {len(expected['greedy_ids'])} ids {'identical' if same else 'DIFFER'}")
    if not same:
        print(f"  gearbox {gen['generated_ids']}\n  HF      {expected['greedy_ids']}")
    if err > args.tolerance or not same:
        sys.exit("FAILED")
    print("parity ok")


if __name__ == "__main__":
    main()
