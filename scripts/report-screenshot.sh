#!/usr/bin/env bash
# A run's report as a browser draws it: `bash scripts/report-screenshot.sh RUN [OUT.png]` writes the
# report (curateevo report) and a headless screenshot of the whole page, 1280 pixels wide and cut
# below its last drawn line (Debian's chromium: `apt-get install chromium`), to check the page as a
# reader sees it. Not part of the suite: Debian's chromium is 273 MB installed, too heavy for
# scripts/setup.sh, so the suite checks the page's HTML (tests/test_report_reader.py) and a browser's
# rendering is checked by hand: on 2026-11-28 and again on 2026-11-29 (the corpus and held-out sizes,
# per-tool table, failed answers beside gold calls, test against ρ0) on tiny runs of the shipped glaive
# corpus and of bfcl-single (Debian chromium 150).
set -euo pipefail
run=${1:?give the run directory}
out=${2:-$run/report/screenshot.png}
cd "$(dirname "$0")/.."
page=$(.venv/bin/python -m evolver.cli report "$run")
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "report-screenshot: no chromium on PATH (apt-get install chromium)" >&2; exit 2; }
tall=16000   # taller than any report so far; the blank below the page is cut off
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,$tall \
  --screenshot="$(realpath -m "$out")" "file://$(realpath "$page")" 2>/dev/null
.venv/bin/python - "$out" "$tall" <<'EOF'
import sys
from PIL import Image, ImageOps

path, tall = sys.argv[1], int(sys.argv[2])
image = Image.open(path).convert("RGB")
bottom = (ImageOps.invert(image).getbbox() or (0, 0, 0, 0))[3]
if bottom >= tall - 1:
    print(f"report-screenshot: the page is longer than {tall} pixels; the screenshot shows its first {tall}",
          file=sys.stderr)
image.crop((0, 0, image.width, min(tall, bottom + 40))).save(path)
EOF
echo "$out"
