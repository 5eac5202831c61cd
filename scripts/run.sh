#!/usr/bin/env bash
# The main job on a fresh machine: install build dependencies, build gearbox (with CUDA
# when nvcc is found), build the mini Gemma-3 engine (seeded random weights, no download)
# tuned for this machine's device, run the multi-profile scenario on it, and generate.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GEARBOX_ROOT"
scripts/setup.sh --build
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEARBOX_BUILD_TESTS=OFF \
  -DGEARBOX_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build/release -j "$(jobs)"
gearbox=build/release/tools/gearbox
set -x
"$gearbox" devices --probe
"$gearbox" build --mini -o build/mini.gbx
"$gearbox" inspect build/mini.gbx
"$gearbox" run build/mini.gbx
"$gearbox" generate build/mini.gbx --prompt-ids 2,651,1974,563,1000 --max-new-tokens 16
