#!/usr/bin/env bash
# The main job on a fresh machine: install build dependencies, build gearbox (with CUDA
# when nvcc is found), list the devices (probing each), and show the profile-selection
# policy on a decode/prefill table.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GEARBOX_ROOT"
scripts/setup.sh --build
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEARBOX_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j "$(jobs)"
gearbox=build/release/tools/gearbox
set -x
"$gearbox" --help
"$gearbox" devices --probe
"$gearbox" policy
"$gearbox" policy --name prefill --seq 1,64
