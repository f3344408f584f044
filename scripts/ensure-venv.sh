#!/usr/bin/env bash
# ensure-venv.sh — makes the project's Python venv (${MOE_VENV:-.venv}) from python/requirements-test.txt, once.
# The venv holds a stamp with the requirements' hash; while it matches, this does nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${MOE_VENV:-$root/.venv}
req=$root/python/requirements-test.txt
stamp=$venv/.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "ensure-venv: creating $venv"
  python3 -m venv "$venv"
fi
echo "ensure-venv: installing $req into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
echo "$want" >"$stamp"
