#!/usr/bin/env python3
"""The side-by-side table of docs/PERFORMANCE.md from benchmark JSON files: `gearbox bench
--json` output and python/tools/hf_bench.py output, in the order given.

  python3 python/tools/bench_table.py gearbox.json hf_eager.json hf_compile.json > table.md
Standard library only.
"""
import json
import sys


def fmt(v):
    return "n/a" if v is None else (f"{v:.3f}" if v < 100 else f"{v:.1f}")


def row_values(doc):
    if "error" in doc:
        return None
    decode = {d["profile"]: d["ms"] for d in doc.get("decode", [])}
    if "decode" in decode:  # gearbox: the decode profile; HF: its only entry
        dec = decode["decode"]
    else:
        dec = next(iter(decode.values()), None)
    prefill = {p["tokens"]: p["ms"] for p in doc.get("prefill", [])}
    rounds = doc.get("round_switching_ms", doc.get("round_ms"))
    return dec, prefill, rounds


def main(paths):
    docs = []
    for p in paths:
        try:
            docs.append(json.load(open(p)))
        except (OSError, ValueError) as e:
            docs.append({"engine": p, "error": f"no results ({e})"})
    lengths = sorted({p["tokens"] for d in docs for p in d.get("prefill", [])})
    head = ["engine", "decode ms/token"] + [f"prefill {n} ms" for n in lengths] + ["1 prefill + N decodes, ms"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for path, d in zip(paths, docs):
        name = d.get("engine", "gearbox (" + d.get("device", "?") + ")")
        values = row_values(d)
        if values is None:
            print(f"| {name} | failed: {d['error']} |" + " |" * (len(head) - 2))
            continue
        dec, prefill, rounds = values
        cells = [name, fmt(dec)] + [fmt(prefill.get(n)) for n in lengths] + [fmt(rounds)]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
