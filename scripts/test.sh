#!/usr/bin/env bash
# Every test and check, as CI runs them (CI runs exactly this script):
#   1. the regular build (gcc, CUDA when nvcc is found), formatting (clang-format), static
#      analysis (clang-tidy), API docs (Doxygen, warnings fail)
#   2. the regular build's tests; GPU tests skip without a GPU
#   3. ASan + UBSan build with clang: all tests, then each libFuzzer target for a bounded time
#   4. TSan build with clang: all tests
#   5. install, the CPack tarball, and the examples built from the installed tree (not the
#      source tree) and run on the mini .pte that step 2's export test wrote
# The sanitized builds run the delegate's tests on the programs step 2 exported
# (GEARBOX_TEST_PROGRAMS_FROM): exporting is uninstrumented Python, the same in every build.
# Set GEARBOX_FUZZ_SECONDS to change the fuzzing time per target (default 30).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GEARBOX_ROOT"
# Each stage's header says when it starts, so a slow stage shows in the log.
step() { printf '\n==== %s (at %dm%02ds)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

# A fresh tree takes about 11 GiB: .venv (5.5) and the three build trees. Stop before any
# work when the disk cannot hold what is still to be written, rather than inside pip or a link.
need_kib=$((11 * 1024 * 1024))
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
held_kib=$({ du -sk .venv build 2>/dev/null || true; } | awk '{ s += $1 } END { print s + 0 }')
if ((free_kib + held_kib < need_kib)); then
  echo "test.sh: about $((need_kib / 1048576)) GiB are needed for .venv and build/ under $PWD;" \
    "$((free_kib / 1048576)) GiB are free and $((held_kib / 1048576)) GiB already held. Free some space and rerun." >&2
  exit 1
fi

step "setup"
scripts/setup.sh
et_prefix=$(executorch_prefix)
fuzz_seconds=${GEARBOX_FUZZ_SECONDS:-30}
sources=$(git ls-files --cached --others --exclude-standard 'include/*.h' 'src/*.h' 'src/*.cpp' 'src/*.cu' 'tools/*.h' 'tools/*.cpp' 'tests/*.h' \
  'tests/*.cpp' 'fuzz/*.cpp' 'examples/*.cpp' 'bench/*.cpp')

step "regular build (gcc)"
cmake -S . -B build/ci -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$et_prefix" >/dev/null
cmake --build build/ci -j "$(jobs)"

step "clang-format"
# shellcheck disable=SC2086
clang-format --dry-run --Werror $sources

step "clang-tidy"
# One file per clang-tidy process, as many at a time as there are cores. The compile
# commands are gcc's; clang ignores the gcc-only warning flags among them.
if ! git ls-files --cached --others --exclude-standard 'src/*.cpp' 'tools/*.cpp' |
  xargs -P "$(jobs)" -n 1 clang-tidy -p build/ci --quiet --extra-arg=-Wno-unknown-warning-option >build/ci/clang-tidy.log 2>&1; then
  grep -v "warnings generated" build/ci/clang-tidy.log
  echo "clang-tidy found problems (above)"
  exit 1
fi

step "doxygen"
rm -rf build/docs && mkdir -p build/docs && doxygen docs/Doxyfile

step "all tests (regular build)"
ctest --test-dir build/ci -j "$(jobs)" --output-on-failure
programs=$GEARBOX_ROOT/build/ci/tests/executorch/programs

step "ASan + UBSan (clang) and fuzzers"
# The delegate runs too (ExecuTorch's libraries are not instrumented, gearbox's are); the
# Python-runtime test is left to the regular build (a sanitized library cannot be loaded
# into an uninstrumented Python).
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ -DGEARBOX_WITH_CUDA=OFF \
  -DCMAKE_PREFIX_PATH="$et_prefix" -DGEARBOX_SANITIZE=address,undefined -DGEARBOX_BUILD_FUZZERS=ON \
  -DGEARBOX_TEST_PROGRAMS_FROM="$programs" >/dev/null
cmake --build build/asan -j "$(jobs)"
ctest --test-dir build/asan -j "$(jobs)" --output-on-failure -LE compile_fail -E executorch.python_runtime
# The tokenizer fuzzer starts from the tokenizer.json fixtures (a u16 length, the JSON, a text).
mkdir -p build/fuzz-corpus/fuzz_tokenizer_json
python3 - build/fuzz-corpus/fuzz_tokenizer_json tests/data/tokenizer/*.json <<'PY'
import os, struct, sys
for path in sys.argv[2:]:
    data = open(path, "rb").read()
    if len(data) < 65536 and b'"model"' in data:
        seed = struct.pack("<H", len(data)) + data + "the sky is blue \u00e9\u6f22 <bos>".encode()
        open(os.path.join(sys.argv[1], "seed_" + os.path.basename(path)), "wb").write(seed)
PY
# One fuzzer a core at a time (each is single-threaded), each on its own corpus and log.
fuzz_one() {
  local name=${1##*/}
  local corpus=build/fuzz-corpus/$name log=build/asan/$name.log
  mkdir -p "$corpus"
  if ! "$1" -max_total_time="$fuzz_seconds" -print_final_stats=1 "$corpus" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "$name found a failure (crash input saved in the working directory)"
    return 1
  fi
  echo "$name: $(grep -m1 -o 'number_of_executed_units: [0-9]*' "$log") runs in ${fuzz_seconds}s, no failure"
}
export -f fuzz_one
export fuzz_seconds
if ! printf '%s\n' build/asan/fuzz/fuzz_* | xargs -P "$(jobs)" -I{} bash -c 'fuzz_one "$1"' _ {}; then
  echo "a fuzzer found a failure (above)"
  exit 1
fi

step "TSan (clang)"
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ -DGEARBOX_WITH_CUDA=OFF \
  -DCMAKE_PREFIX_PATH="$et_prefix" -DGEARBOX_SANITIZE=thread -DGEARBOX_TEST_PROGRAMS_FROM="$programs" >/dev/null
cmake --build build/tsan -j "$(jobs)"
ctest --test-dir build/tsan -j "$(jobs)" --output-on-failure -LE compile_fail -E executorch.python_runtime

step "install, package, examples from the installed tree"
rm -rf build/install build/examples
cmake --install build/ci --prefix build/install >/dev/null
(cd build/ci && cpack -G TGZ >/dev/null && ls -1 gearbox-*.tar.gz)
cmake -S build/install/share/gearbox/examples -B build/examples -G Ninja \
  -DCMAKE_PREFIX_PATH="$GEARBOX_ROOT/build/install;$et_prefix" >/dev/null
cmake --build build/examples -j "$(jobs)"
pte=build/ci/tests/executorch/programs/mini.pte
GEARBOX_DEVICE=cpu build/examples/multi_profile_main "$pte"
GEARBOX_DEVICE=cpu build/examples/multi_profile_benchmark "$pte" --prompt-len 16 --decode-steps 8 --rounds 3 --warmup 1
step "done"
