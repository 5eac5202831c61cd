#!/usr/bin/env python3
"""Per-kernel table from `ncu --metrics gpu__time_duration.sum --csv` output.

  ncu --clock-control none --metrics gpu__time_duration.sum --csv gearbox run E --seq 512 ... > ncu.csv
  python3 python/tools/ncu_summary.py ncu.csv [--skip N]

Groups kernels by name (template arguments cut off), prints launches, total and mean
microseconds, largest first, and the sum. --skip N drops the first N kernels (a warm-up
call). Each kernel is timed alone by the profiler, so the sum is the device time without
overlap or launch gaps. Standard library only.
"""
import argparse
import collections
import csv
import sys

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def short_name(name):
    """`void ns::(anonymous namespace)::gemv_kernel<...>(args)` -> `gemv_kernel`."""
    depth, out = 0, []
    for ch in name.replace("(anonymous namespace)", ""):  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    short = "".join(out).split("(")[0].split("::")[-1].strip()
    return short.removeprefix("void ").strip() or name


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--skip", type=int, default=0)
    args = p.parse_args()
    with open(args.csv, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages are not quoted
    rows = [r for r in csv.DictReader(lines) if r.get("Metric Name") == "gpu__time_duration.sum"]
    if not rows:
        sys.exit("no gpu__time_duration.sum rows in " + args.csv)
    rows = rows[args.skip:]
    total = collections.defaultdict(float)
    count = collections.Counter()
    for r in rows:
        unit = r["Metric Unit"]
        if unit not in UNITS:
            sys.exit(f"unknown unit {unit!r} in {args.csv}")
        us = float(r["Metric Value"].replace(",", "")) * UNITS[unit]
        name = short_name(r["Kernel Name"])
        total[name] += us
        count[name] += 1
    print(f"| kernel | launches | us | us each |\n|---|---|---|---|")
    for name in sorted(total, key=total.get, reverse=True):
        print(f"| {name} | {count[name]} | {total[name]:.1f} | {total[name] / count[name]:.2f} |")
    print(f"| all | {sum(count.values())} | {sum(total.values()):.1f} | |")


if __name__ == "__main__":
    main()
