# Sourced by scripts/test and scripts/demo: make .venv with zotsink and its test extra.
# Idempotent; re-installs only when pyproject.toml is newer than the last install.
# PYTHON picks the interpreter and ZOTSINK_VENV the directory (scripts/test-pythons makes
# one .venv-3.X per Python that way).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ZOTSINK_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  echo "zotsink: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
stamp=$VENV/.zotsink-installed
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
  echo "zotsink: installing zotsink[test] into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[test]" --config-settings editable_mode=compat
  touch "$stamp"
fi
export PATH=$VENV/bin:$PATH
# Byte-compile once: start-up time matters (one CLI run per job-array task), and an
# environment with PYTHONDONTWRITEBYTECODE would otherwise recompile zotsink on every run.
"$VENV/bin/python" -m compileall -q "$ROOT/zotsink" >/dev/null || true
