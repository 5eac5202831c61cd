#!/usr/bin/env bash
# The decoder families on a GPU, from prebuilt binaries:
#   bench/gpu/run_families.sh BIN_DIR OUT_DIR [ARCH...]
# BIN_DIR holds gearbox and cuda_families_test (and lib/); ARCH is an --arch of
# python/tools/hf_gpu_reference.py (default: llama3.2-1b qwen3-0.6b). Per ARCH: a checkpoint
# of that shape with random bf16 weights and HF's log-probs on it, gearbox's log-probs from
# `gearbox build --hf` (decode and prefill paths) against HF bf16 and fp32, `gearbox bench`,
# and HF torch.compile (reduce-overhead and default, static cache) on the same checkpoint and GPU.
# GEARBOX_HF_BENCH=0 skips the HF benchmark.
set -uo pipefail
bin=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
archs=("$@")
[[ ${#archs[@]} -gt 0 ]] || archs=(llama3.2-1b qwen3-0.6b)
root=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
gearbox="$bin/gearbox"
work=$(mktemp -d)
status=0
step() { printf '\n==== %s\n' "$*"; }
check() { "$@" || { echo "FAILED: $*"; status=1; }; }

step "cuda_families_test"
check "$bin/cuda_families_test" --gtest_brief=1
for arch in "${archs[@]}"; do
  step "$arch: HF reference and gearbox"
  ck="$work/$arch"
  check python3 "$root/python/tools/hf_gpu_reference.py" "$ck" --arch "$arch" --prompt-len 64
  check "$gearbox" build --hf "$ck" -o "$work/$arch.gbx" --device cuda --max-seq 2048 2>"$out/build_$arch.log"
  tail -n 1 "$out/build_$arch.log"
  ids=$(python3 -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['prompt_ids'])))" "$ck/reference.json")
  check "$gearbox" score "$work/$arch.gbx" --prompt-ids "$ids" --json --device cuda >"$out/score_$arch.json"
  python3 "$root/tests/parity/compare_logprobs.py" "$ck/reference.json" "$out/score_$arch.json"
  check "$gearbox" score "$work/$arch.gbx" --prompt-ids "$ids" --prefill --json --device cuda >"$out/score_${arch}_prefill.json"
  python3 "$root/tests/parity/compare_logprobs.py" "$ck/reference.json" "$out/score_${arch}_prefill.json"
  "$gearbox" inspect "$work/$arch.gbx" >"$out/inspect_$arch.txt"
  check "$gearbox" bench "$work/$arch.gbx" --device cuda --json "$out/bench_$arch.json"
  if [[ "${GEARBOX_HF_BENCH:-1}" != 0 ]]; then
    for cm in reduce-overhead default; do
      timeout 240 python3 "$root/python/tools/hf_bench.py" "$ck" --mode compile --compile-mode $cm \
        --json "$out/hf_compile_${cm}_$arch.json" >"$out/hf_compile_${cm}_$arch.log" 2>&1
    done
    python3 "$root/python/tools/bench_table.py" "$out/bench_$arch.json" "$out/hf_compile_reduce-overhead_$arch.json" \
      "$out/hf_compile_default_$arch.json" | tee "$out/side_by_side_$arch.md"
  fi
done
rm -rf "$work"
exit $status
