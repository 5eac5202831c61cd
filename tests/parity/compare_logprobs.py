#!/usr/bin/env python3
"""Compares `gearbox score --json` output with a reference.json of hf_gpu_reference.py:
prints the max and mean |difference| of the log-probs against HF bf16 and HF fp32."""
import json
import sys

ref = json.load(open(sys.argv[1]))
got = json.load(open(sys.argv[2]))["token_logprobs"]
for key in ("bfloat16", "float32"):
    want = ref[key]
    d = [abs(a - b) for a, b in zip(want, got)]
    print(f"gearbox vs HF {key}: {len(d)} tokens, max |dlogp| {max(d):.4g}, mean {sum(d) / len(d):.4g}")
d = [abs(a - b) for a, b in zip(ref["bfloat16"], ref["float32"])]
print(f"HF bfloat16 vs HF float32 (the bf16 noise floor): max {max(d):.4g}, mean {sum(d) / len(d):.4g}")
