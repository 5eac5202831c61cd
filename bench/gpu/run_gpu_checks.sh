#!/usr/bin/env bash
# The GPU checks and benchmarks, on a machine with an NVIDIA GPU, from prebuilt binaries:
#   bench/gpu/run_gpu_checks.sh BIN_DIR OUT_DIR
# BIN_DIR holds gearbox, cuda_kernels_test, cuda_engine_test, cuda_batch_test, devices_gpu_test, cuda_kernels_bench,
# cublaslt_sanitizer_probe (and lib/ with shared libraries they need); OUT_DIR receives logs
# and JSON. Needs python3 with torch and transformers for the HF comparison on the Gemma-3-1B
# shape.
# With GEARBOX_PTE_DIR (programs and reference.json from tests/executorch/
# make_test_programs.py) and delegate_test, multi_profile_main, multi_profile_benchmark in
# BIN_DIR, the ExecuTorch delegate runs on the CUDA device too. With GEARBOX_KEEP_ENGINE=PATH
# the 1B engine it builds is kept there (for more runs against the same tactics). With
# GEARBOX_GPU_SANITIZERS=0 the compute-sanitizer runs are left out (they take most of the
# script's time: racecheck alone runs for minutes).
set -uo pipefail
bin=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
gearbox="$bin/gearbox"
work=$(mktemp -d)
step() { printf '\n==== %s\n' "$*"; }
status=0
check() { "$@" || { echo "FAILED: $*"; status=1; }; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
"$gearbox" devices --probe

step "GPU tests"
check "$bin/devices_gpu_test"
check "$bin/cuda_kernels_test"
check "$bin/cuda_engine_test"
check "$bin/cuda_batch_test"

if [[ "${GEARBOX_GPU_SANITIZERS:-1}" != 0 ]]; then
step "compute-sanitizer"
check compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_kernels_test" --gtest_brief=1 >"$out/memcheck.log" 2>&1
tail -n 3 "$out/memcheck.log"
check compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/cuda_kernels_test" --gtest_filter='*Attention*:*Gemv*:*HeadNormRope*:*NormAddNorm*:*Rope*' --gtest_brief=1 >"$out/racecheck.log" 2>&1
tail -n 3 "$out/racecheck.log"
check compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_engine_test" --gtest_brief=1 >"$out/memcheck_engine.log" 2>&1
tail -n 1 "$out/memcheck_engine.log"
check compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_batch_test" --gtest_brief=1 >"$out/memcheck_batch.log" 2>&1
tail -n 1 "$out/memcheck_batch.log"
# cuBLASLt alone under the sanitizers (cublaslt_sanitizer_probe): its sm_90 GEMM kernels
# report shared-memory hazards of their own under racecheck, and initcheck does not see their
# stores, so it flags whatever reads a GEMM's output (docs/decisions/0023-sanitizers-and-cublaslt.md).
# Checked here: the probe's GEMMs write every output, and initcheck flags a buffer
# nothing wrote and passes one that was written. The GEMM cases under the two tools are logged,
# not checked, so that a cuBLASLt or sanitizer release that changes this shows in the logs.
probe="$bin/cublaslt_sanitizer_probe"
check compute-sanitizer --tool initcheck --error-exitcode 9 "$probe" control written >"$out/initcheck_probe.log" 2>&1
if compute-sanitizer --tool initcheck --error-exitcode 9 "$probe" control unwritten >>"$out/initcheck_probe.log" 2>&1; then
  echo "FAILED: initcheck did not flag a read of memory nothing wrote"
  status=1
fi
for gemm in "17 1152 6912 f32 0" "96 6912 1152 bf16 0"; do
  # shellcheck disable=SC2086  # M N K OUT INDEX, five arguments
  check "$probe" gemm $gemm
  for tool in initcheck racecheck; do
    # shellcheck disable=SC2086
    compute-sanitizer --tool $tool --show-backtrace no --print-limit 3 "$probe" gemm $gemm >>"$out/${tool}_probe.log" 2>&1
  done
done
grep -h -m1 '^cublasLt ' "$out/initcheck_probe.log"
grep -h 'gemm M=\|SUMMARY\|Error:' "$out/initcheck_probe.log" "$out/racecheck_probe.log"
fi

step "mini Gemma-3 on CUDA: scenario, parity with the CPU device and HF"
check "$gearbox" build --mini -o "$work/mini_cuda.gbx" --device cuda
check "$gearbox" run "$work/mini_cuda.gbx" --device cuda
for c in window_4x gqa_5x; do
  check python3 "$root/tests/parity/check_parity.py" --gearbox "$gearbox" --checkpoint "$root/tests/data/parity/$c" --device cuda
done
if [[ "${GEARBOX_GPU_SANITIZERS:-1}" != 0 ]]; then
  check compute-sanitizer --tool memcheck --error-exitcode 9 "$gearbox" run "$work/mini_cuda.gbx" --device cuda \
    >"$out/memcheck_run.log" 2>&1
  tail -n 2 "$out/memcheck_run.log"
fi

step "Gemma-3-1B shape, random bf16 weights: HF reference and gearbox"
check python3 "$root/python/tools/hf_gpu_reference.py" "$work/g1b" --prompt-len 64
check "$gearbox" build --hf "$work/g1b" -o "$work/g1b.gbx" --device cuda --max-seq 2048 2>"$out/build_1b.log"
tail -n 1 "$out/build_1b.log"
ids=$(python3 -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['prompt_ids'])))" "$work/g1b/reference.json")
check "$gearbox" score "$work/g1b.gbx" --prompt-ids "$ids" --json --device cuda >"$out/score_1b.json"
python3 "$root/tests/parity/compare_logprobs.py" "$work/g1b/reference.json" "$out/score_1b.json"
# The prefill path (each prefix in one call: the prefill profile's kernels, e.g. its attention).
check "$gearbox" score "$work/g1b.gbx" --prompt-ids "$ids" --prefill --json --device cuda >"$out/score_1b_prefill.json"
python3 "$root/tests/parity/compare_logprobs.py" "$work/g1b/reference.json" "$out/score_1b_prefill.json"
"$gearbox" inspect "$work/g1b.gbx" >"$out/inspect_1b.txt"

step "benchmarks"
check "$gearbox" bench "$work/g1b.gbx" --device cuda --json "$out/bench_1b.json" --svg "$out/bench_1b.svg"
# The same engine with the fused chains off (kernels/norm_rope.cu, residual_norm.cu): what fusion buys; and with
# programmatic dependent launch off (devices/cuda/launch.h): what overlapping launches buys.
check env GEARBOX_CUDA_FUSION=0 "$gearbox" bench "$work/g1b.gbx" --device cuda --json "$out/bench_1b_unfused.json"
check env GEARBOX_CUDA_PDL=0 "$gearbox" bench "$work/g1b.gbx" --device cuda --json "$out/bench_1b_no_pdl.json"
check env GEARBOX_CUDA_PDL=0 "$gearbox" score "$work/g1b.gbx" --prompt-ids "$ids" --json --device cuda \
  >"$out/score_1b_no_pdl.json"
python3 "$root/tests/parity/compare_logprobs.py" "$work/g1b/reference.json" "$out/score_1b_no_pdl.json"
check "$gearbox" bench "$work/mini_cuda.gbx" --device cuda --json "$out/bench_mini.json"
# Batched decode: one engine with up to 32 KV-cache slots, decode steps of 1, 8 and 32 rows.
check "$gearbox" build --hf "$work/g1b" -o "$work/g1b_batch.gbx" --device cuda --max-seq 2048 \
  --profile prefill:1x1:1x128:1x2048 --profile decode:1x1:8x1:32x1 2>"$out/build_1b_batch.log"
check "$gearbox" bench "$work/g1b_batch.gbx" --device cuda --batch 1,8,32 --json "$out/bench_1b_batch.json"
# HF transformers on the same checkpoint and GPU, eager and torch.compile (static cache),
# written as the same JSON; the side-by-side table of docs/PERFORMANCE.md.
# (A failing HF variant is recorded in its JSON and the table; it does not fail the checks.)
# GEARBOX_HF_BENCH=0 skips it (minutes of torch.compile).
if [[ "${GEARBOX_HF_BENCH:-1}" != 0 ]]; then
timeout 600 python3 "$root/python/tools/hf_bench.py" "$work/g1b" --mode eager --json "$out/hf_eager.json" \
  >"$out/hf_eager.log" 2>&1
for cm in reduce-overhead default; do
  timeout 600 python3 "$root/python/tools/hf_bench.py" "$work/g1b" --mode compile --compile-mode $cm \
    --json "$out/hf_compile_$cm.json" >"$out/hf_compile_$cm.log" 2>&1
done
python3 "$root/python/tools/bench_table.py" "$out/bench_1b.json" "$out/hf_eager.json" \
  "$out/hf_compile_reduce-overhead.json" "$out/hf_compile_default.json" | tee "$out/side_by_side.md"
fi
check "$bin/cuda_kernels_bench" >"$out/cuda_kernels_bench.log" 2>&1
tail -n 30 "$out/cuda_kernels_bench.log"
if [[ -n "${GEARBOX_PTE_DIR:-}" && -x "$bin/delegate_test" ]]; then
  step "ExecuTorch delegate on the CUDA device"
  check env GEARBOX_TEST_PROGRAMS="$GEARBOX_PTE_DIR" GEARBOX_DEVICE=cuda GEARBOX_TEST_TOLERANCE=${GEARBOX_DELEGATE_TOLERANCE:-2e-4} \
    "$bin/delegate_test" --gtest_filter="${GEARBOX_DELEGATE_FILTER:-*}" --gtest_brief=1
  check "$bin/multi_profile_main" "$GEARBOX_PTE_DIR/mini.pte"
  check "$bin/multi_profile_main" "$GEARBOX_PTE_DIR/mini_pd.pte" --method prefill
  check "$bin/multi_profile_benchmark" "$GEARBOX_PTE_DIR/mini.pte" --prompt-len 32 --decode-steps 32 --rounds 10
  check compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/multi_profile_main" "$GEARBOX_PTE_DIR/mini.pte" \
    >"$out/memcheck_delegate.log" 2>&1
  tail -n 2 "$out/memcheck_delegate.log"
fi
[[ -n "${GEARBOX_KEEP_ENGINE:-}" ]] && cp "$work/g1b.gbx" "$GEARBOX_KEEP_ENGINE"
rm -rf "$work"
exit $status
