# Sourced by the other scripts: where things are. Not meant to be run.
GEARBOX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The ExecuTorch SDK ships inside the executorch wheel in .venv.
executorch_prefix() {
  [[ -x "$GEARBOX_ROOT/.venv/bin/python" ]] || return 0
  local site
  site=$("$GEARBOX_ROOT/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  [[ -d "$site/executorch/share/cmake" ]] && echo "$site/executorch"
  return 0
}
jobs() { nproc 2>/dev/null || echo 2; }
