"""A `bench quality` report on a held-out benchmark as a raw result under bench/results/.

    .venv/bin/python bench/held_out_raw.py runs/ace-table1-150/quality.json \
        --command "curateevo bench quality --benchmark acebench ..." --what "..." \
        --out bench/results/held-out-acebench-150-seed0-cpu-small-2026-12-06.json

The report's rows, pairs and setting as `bench quality` wrote them, with the date, the command, the
commit, the page that reads it (held-out.md), the machine it ran on (trainer.devices.machine, unless
the report names one) and the evaluation's cost per row from each cell's metrics (wall seconds,
prompt and generated tokens, the share of the machine's fp32 matmul peak the decoding reached).
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PARAMS = 134.5e6
"""SmolLM2-135M's parameters: a token costs ~2 × PARAMS FLOPs forward."""
FP32_PEAK_GFLOPS = 180.0
"""The 2-core fp32 matmul peak of these EPYCs (shared/FIELD-NOTES.md: ~82–93 GFLOP/s a core)."""


def cost(cache: Path, report: dict) -> list[dict]:
    """The evaluation cost of every cell of this benchmark and task set in the cache (its metrics.json):
    wall seconds, prompts, prompt and generated tokens, and the share of the fp32 peak its decoding
    reached (2 × parameters × tokens pushed through the model, padding included, over the seconds)."""
    setting = report["setting"]
    out = []
    for metrics in sorted((cache / "cells").glob("*/eval/metrics.json")):
        doc = json.loads(metrics.read_text())
        if doc.get("benchmark") != setting["benchmark"] or len(doc.get("tasks", [])) != report["tasks"]:
            continue
        t, pol = doc["timing"], doc["timing"].get("policy") or {}
        pushed = pol.get("prompt_tokens", 0) + pol.get("padded_row_steps", 0)
        seconds = pol.get("generate_s") or 0
        out.append({"cell": metrics.parent.parent.name, "P": doc["P"], "adapter": (doc["policy"].get("adapter") or "").split("/")[-2:-1],
                    "episodes_s": t.get("episodes_s"), "prompts": pol.get("prompts"), "prompt_tokens": pol.get("prompt_tokens"),
                    "generated_tokens": pol.get("generated_tokens"), "padded_row_steps": pol.get("padded_row_steps"),
                    "call_rate_by_category": {c: m.get("call_rate") for c, m in sorted(doc["per_category"].items())},
                    "fp32_peak_share": round(2 * PARAMS * pushed / seconds / 1e9 / FP32_PEAK_GFLOPS, 4) if seconds else None})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("report", type=Path)
    p.add_argument("--command", required=True)
    p.add_argument("--what", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cache", type=Path, default=ROOT / "runs" / "bench-quality")
    p.add_argument("--page", default="held-out.md")
    args = p.parse_args(argv)
    from trainer.devices import machine

    report = json.loads(args.report.read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {"date": datetime.date.today().isoformat(), "command": args.command, "commit": commit, "what": args.what,
           "kind": "quality", "page": args.page, **report,
           "machine": report.get("machine") or machine(report["setting"].get("precision", "bf16")),
           "evaluation_cost": cost(args.cache, report)}
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
