#!/usr/bin/env bash
# Two builds of gearbox benchmarked side by side on one GPU, on the same engines:
#   bench/gpu/compare_builds.sh BEFORE_DIR AFTER_DIR OUT_DIR [ROUNDS]
# Each DIR holds a `gearbox` binary (and lib/ with shared libraries it needs). The engines
# (the Gemma-3-1B shape with seeded random bf16 weights, and the mini) are built once by
# BEFORE's builder, so that both builds run the same tactics; then `gearbox bench` runs
# ROUNDS times (default 3) on each engine, the two builds alternating so that drift of the
# card hits both alike. compare_bench.py prints each metric's median for both and the change.
# AFTER's builder also builds the 1B engine, which BEFORE must read and run (the format is
# unchanged). Needs python3 with torch and transformers (python/tools/hf_gpu_reference.py).
set -uo pipefail
before=$(cd "$1" && pwd)
after=$(cd "$2" && pwd)
out=$(mkdir -p "$3" && cd "$3" && pwd)
rounds=${4:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH="$before/lib:$after/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
work=$(mktemp -d)
status=0
check() { "$@" || { echo "FAILED: $*"; status=1; }; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
check python3 "$root/python/tools/hf_gpu_reference.py" "$work/g1b" --prompt-len 16 >"$out/hf_reference.log" 2>&1
check "$before/gearbox" build --hf "$work/g1b" -o "$work/g1b.gbx" --device cuda --max-seq 2048 2>"$out/build_1b.log"
check "$before/gearbox" build --mini -o "$work/mini.gbx" --device cuda 2>"$out/build_mini.log"
check "$after/gearbox" build --hf "$work/g1b" -o "$work/g1b_after.gbx" --device cuda --max-seq 2048 \
  2>"$out/build_1b_after.log"
check "$before/gearbox" run "$work/g1b_after.gbx" --device cuda --seq 1 --auto >/dev/null
for r in $(seq 1 "$rounds"); do
  for b in before after; do
    bin=$before
    [[ $b == after ]] && bin=$after
    check "$bin/gearbox" bench "$work/g1b.gbx" --device cuda --json "$out/1b_${b}_$r.json" >"$out/1b_${b}_$r.log" 2>&1
    check "$bin/gearbox" bench "$work/mini.gbx" --device cuda --json "$out/mini_${b}_$r.json" >"$out/mini_${b}_$r.log" 2>&1
  done
done
python3 "$root/python/tools/compare_bench.py" "$out" | tee "$out/compare.md"
rm -rf "$work"
exit $status
