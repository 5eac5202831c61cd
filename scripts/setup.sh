#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test gearbox: Debian packages (only the
# missing ones, with one apt-get call) and the Python packages of requirements.txt in a
# project-local virtual environment (.venv). Idempotent, and quiet when nothing is missing.
#
#   scripts/setup.sh            everything (build, tests, checks)
#   scripts/setup.sh --build    only what building and running needs
set -euo pipefail
cd "$(dirname "$0")/.."

build_packages=(build-essential cmake ninja-build pkg-config libxxhash-dev libsentencepiece-dev nlohmann-json3-dev
  libcli11-dev libpcre2-dev libutf8proc-dev)
test_packages=(libgtest-dev librapidcheck-dev libbenchmark-dev clang libclang-rt-14-dev clang-tidy clang-format
  doxygen python3-venv)
packages=("${build_packages[@]}")
[[ "${1:-}" == "--build" ]] || packages+=("${test_packages[@]}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[[ "${1:-}" == "--build" ]] && exit 0

# Python: a venv owned by the project, refreshed when requirements.txt changes.
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [[ ! -x .venv/bin/python || ! -f $stamp || "$(cat "$stamp")" != "$want" ]]; then
  echo "setup: installing Python packages into .venv (requirements.txt)"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" >"$stamp"
fi
