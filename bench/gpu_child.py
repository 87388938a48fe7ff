"""The part of a GPU run that imports the carried stack (bench/gpu_run.py starts it with the
installed wheels on PYTHONPATH and stops it at the hard limit): check the stack and the device,
run the plan, write the summary and the returned cache after every unit."""
from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gpu_plan import Plan, PlanConfig, execute  # noqa: E402

RETURNED = ("cells", "calibrations", "reports", "gpu-plan.json", "throughput.json", "runs")
"""What of the cache comes back in cells.tar.gz, weights left out (`_light`): adapters are large,
and every cell has scored its gold calls while its adapter was at hand."""
WEIGHTS = (".safetensors", ".bin", ".pt", ".gguf")


def _light(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if info.issym() or info.islnk() or info.name.endswith(WEIGHTS) or "/tensorboard/" in info.name else info


def check(device: str) -> dict:
    """The versions that decide the figures, and the device; a cuda plan on a machine without one
    is one sentence."""
    import importlib.metadata as md

    import torch

    versions = {}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers", "bfcl-eval"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu run: error: the plan is for cuda and torch sees no GPU here; pack with --device cpu "
                         "for a dry run")
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return {"versions": versions, "device": device, "device_name": name}


def write_outputs(plan: Plan, out: Path, setup: dict, this_time: list[dict], note: str | None = None) -> None:
    """summary.json, summary.md and cells.tar.gz in `out` (what the device sends back)."""
    out.mkdir(parents=True, exist_ok=True)
    doc = {"plan": plan.cfg.to_json(), "setup": setup, "this_time": this_time, "ledger": plan.ledger,
           **({"note": note} if note else {})}
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
    tmp.replace(out / "summary.json")
    (out / "summary.md").write_text(markdown(doc))
    with tarfile.open(out / "cells.tar.gz.tmp", "w:gz") as tar:
        for name in RETURNED:
            if (plan.cache / name).exists():
                tar.add(str(plan.cache / name), arcname=name, filter=_light)
    (out / "cells.tar.gz.tmp").replace(out / "cells.tar.gz")


def markdown(doc: dict) -> str:
    setup = doc.get("setup", {})
    check_ = setup.get("check") or {}
    lines = ["# GPU run (issue 42)", "",
             f"device: {check_.get('device_name', '?')}; versions: "
             + ", ".join(f"{k} {v}" for k, v in (check_.get("versions") or {}).items()), ""]
    if doc.get("note"):
        lines += [f"**{doc['note']}**", ""]
    lines += ["| unit | this command | seconds | why |", "|---|---|---|---|"]
    for row in doc["this_time"]:
        lines.append(f"| {row['unit']} | {row['status']} | {row.get('seconds', '')} | {row.get('why', '')} |")
    for entry in doc["ledger"].values():
        result = entry.get("result") or {}
        for cell in result.get("cells") or ():
            lines.append(f"\n{entry['unit']} seed {cell['seed']}: P = {cell['P']}; SFT {json.dumps(cell['sft'])}; "
                         f"GRPO {json.dumps(cell['grpo'])}; evaluation {cell['eval_wall_s']} s")
        if result.get("report"):
            lines += ["", f"## {entry['unit']}", "", result["report"]]
        if result.get("table"):
            lines += ["", f"## {entry['unit']}", "", "```", result["table"], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--start-until", type=float)
    p.add_argument("--hard-stop", type=float)
    p.add_argument("--model-ready", action="store_true")
    p.add_argument("--note", help="only rewrite the summary with this note (the plan was stopped)")
    args = p.parse_args(argv)
    manifest = json.loads((args.state / "carry.json").read_text())
    setup = json.loads((args.state / "setup.json").read_text())
    plan = Plan(PlanConfig.from_json(manifest["plan"]), args.state, args.out, manifest["runtime"], args.model_ready)
    if args.note:
        running = [e for e in plan.ledger.values() if e.get("status") == "running"]
        for entry in running:   # the unit in flight was lost with the child; the next command runs it again
            entry.update(status="stopped", why=args.note)
        if running:
            plan.save()
        earlier = json.loads((args.out / "summary.json").read_text())["this_time"] if (args.out / "summary.json").is_file() else []
        lost = [{"unit": e["unit"], "status": "stopped", "why": args.note} for e in running]
        write_outputs(plan, args.out, setup, earlier + lost, args.note)
        return 0
    setup["check"] = check(plan.cfg.device)
    (args.state / "setup.json").write_text(json.dumps(setup, indent=1) + "\n")
    say = lambda text: print(text, file=sys.stderr, flush=True)   # noqa: E731
    this_time = execute(plan, args.start_until, args.hard_stop, say,
                        after=lambda done: write_outputs(plan, args.out, setup, done))
    write_outputs(plan, args.out, setup, this_time)
    failed = [r["unit"] for r in this_time if r["status"] == "failed"]
    say(f"gpu run: {sum(r['status'] == 'done' for r in this_time)} unit(s) done this time, "
        f"{sum(r['status'] == 'cached' for r in this_time)} cached" + (f", failed: {', '.join(failed)}" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
