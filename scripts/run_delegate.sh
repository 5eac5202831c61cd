#!/usr/bin/env bash
# The ExecuTorch way in: export the mini Gemma-3 (seeded random weights, no download) from
# PyTorch to a .pte delegated to gearbox, then run it with ExecuTorch's Module through the
# examples built against the installed gearbox package:
#   scripts/run_delegate.sh            (CUDA when present, else the CPU)
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GEARBOX_ROOT"
scripts/setup.sh
et_prefix=$(executorch_prefix)
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEARBOX_BUILD_TESTS=OFF \
  -DGEARBOX_BUILD_BENCHMARKS=OFF -DCMAKE_PREFIX_PATH="$et_prefix" >/dev/null
cmake --build build/release -j "$(jobs)"
cmake --install build/release --prefix build/release/install >/dev/null
cmake -S build/release/install/share/gearbox/examples -B build/release/examples -G Ninja \
  -DCMAKE_PREFIX_PATH="$GEARBOX_ROOT/build/release/install;$et_prefix" >/dev/null
cmake --build build/release/examples -j "$(jobs)"
set -x
GEARBOX_CLI=build/release/tools/gearbox PYTHONPATH=python .venv/bin/python -m gearbox.export -o build/mini.pte --max-seq 256
build/release/examples/multi_profile_main build/mini.pte
build/release/examples/multi_profile_benchmark build/mini.pte --prompt-len 64 --decode-steps 32 --rounds 5
