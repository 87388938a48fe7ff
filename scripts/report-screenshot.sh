#!/usr/bin/env bash
# A run's report as a browser draws it: `bash scripts/report-screenshot.sh RUN [OUT.png]` writes the
# report (curateevo report) and a full-page headless screenshot of it (Debian's chromium:
# `apt-get install chromium`), to check the page as a reader sees it.
set -euo pipefail
run=${1:?give the run directory}
out=${2:-$run/report/screenshot.png}
cd "$(dirname "$0")/.."
page=$(.venv/bin/python -m evolver.cli report "$run")
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "report-screenshot: no chromium on PATH (apt-get install chromium)" >&2; exit 2; }
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,4000 \
  --screenshot="$(realpath -m "$out")" "file://$(realpath "$page")" 2>/dev/null
echo "$out"
