#!/usr/bin/env python3
"""Compares `gearbox bench --json` files of two builds (bench/gpu/compare_builds.sh).

  python3 python/tools/compare_bench.py DIR
reads DIR/{1b,mini}_{before,after}_N.json and prints, per engine and metric, the median
over the rounds of each build and the change in percent (lower is better for every metric).
"""
import glob
import json
import os
import statistics
import sys


def metrics(doc):
    """The bench's timings as name -> milliseconds (or microseconds, named so)."""
    m = {}
    for d in doc.get("decode", []):
        m[f"decode[{d['profile']}] ms"] = d["ms"]
    for p in doc.get("prefill", []):
        m[f"prefill[{p['tokens']}] ms"] = p["ms"]
    for key in ("switch_ms", "switch_into_decode_host_us", "switch_into_prefill_host_us", "round_switching_ms",
                "round_prefill_only_ms"):
        if key in doc:
            m[key] = doc[key]
    distinct = doc.get("distinct_lengths", {})
    if distinct.get("n"):
        m["distinct lengths, first sight, median ms"] = distinct["first_ms"]
        m["distinct lengths, third sight, median ms"] = distinct["repeat_ms"]
    # The first-seen lengths by octave of the cuBLASLt row buckets ((256, 512], (512, 1024]...).
    octaves = {}
    for entry in distinct.get("lengths", []):
        top = 16
        while top < entry["tokens"]:
            top *= 2
        octaves.setdefault(top, []).append(entry["first_ms"])
    for top in sorted(octaves):
        m[f"first sight in ({top // 2}, {top}] tokens, median ms"] = statistics.median(octaves[top])
    return m


def main():
    root = sys.argv[1]
    for engine in ("1b", "mini"):
        runs = {}
        for build in ("before", "after"):
            files = sorted(glob.glob(os.path.join(root, f"{engine}_{build}_*.json")))
            runs[build] = [metrics(json.load(open(f))) for f in files]
        if not runs["before"] or not runs["after"]:
            print(f"{engine}: no runs of both builds")
            continue
        print(f"\n{engine} ({len(runs['before'])} + {len(runs['after'])} runs, median)\n")
        print("| metric | before | after | change |\n|---|---|---|---|")
        for name in runs["before"][0]:
            b = statistics.median(r[name] for r in runs["before"] if name in r)
            values = [r[name] for r in runs["after"] if name in r]
            if not values:
                print(f"| {name} | {b:.4f} | - | - |")
                continue
            a = statistics.median(values)
            change = (a - b) / b * 100 if b else 0.0
            print(f"| {name} | {b:.4f} | {a:.4f} | {change:+.1f}% |")


if __name__ == "__main__":
    main()
