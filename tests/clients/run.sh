#!/usr/bin/env bash
# Client tests: a Python venv with the real client libraries (installed by name with pip),
# then pytest against a real `ruvllm serve` on the default model.
# Usage: tests/clients/run.sh PATH/TO/ruvllm [pytest args]
#        tests/clients/run.sh --prepare   (only the venv: scripts/test.sh runs it early)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${1:?usage: run.sh PATH/TO/ruvllm | --prepare}"
shift
venv="$root/.venv-clients"
stamp="$venv/.requirements"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$stamp"; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$stamp"
fi
[ "$bin" = --prepare ] && exit 0
export RUVLLM_BIN="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
cd "$here"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
