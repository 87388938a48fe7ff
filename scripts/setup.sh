#!/usr/bin/env bash
# Idempotent install of everything curateevo needs on a fresh Debian machine (as root) or a
# user's machine: a virtual environment in .venv holding exactly requirements.lock (hash-checked),
# then the project, editable. Re-running it changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CURATEEVO_VENV:-.venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }

bash scripts/docker-engine.sh  # the sandbox's engine: every time (instant when it answers), never fatal
# ScienceWorld (the second environment) runs its simulator on a JRE: installed like the engine's
# packages (as root on Debian, when missing), never fatal; without it ScienceWorld says so in one line.
if ! command -v java >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "curateevo: installing a Java runtime (apt) for ScienceWorld" >&2
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends default-jre-headless \
    || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends default-jre-headless; }; } \
    >/dev/null 2>&1 || echo "curateevo: could not install Java; ScienceWorld will not run" >&2
fi

# A stamp keyed on the lock and the install files makes the common case (nothing changed) instant.
stamp="$VENV/.curateevo-installed"
want=$(cat requirements.lock pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "curateevo: installing requirements.lock into $VENV (first run takes a few minutes)" >&2
# Exactly the lock: every package pinned with its hashes (torch's CPU wheel and the packages whose
# declared dependencies must be skipped included), nothing resolved here, so a package index that
# moved changes nothing. `bash scripts/lock.sh` refreshes the lock on purpose.
pip install --no-deps --require-hashes -r requirements.lock
extras=$("$VENV/bin/python" -m sandbox.package_lock extras)
if [ -n "$extras" ]; then
  echo "curateevo: removing what the lock does not hold: $(echo $extras)" >&2
  pip uninstall -y $extras
fi
pip install --no-deps --no-build-isolation -e .
"$VENV/bin/python" -m sandbox.package_lock check
echo "$want" > "$stamp"
