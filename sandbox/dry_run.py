"""The code agent's validation command: dry-run a strategy on a corpus sample, inside the sandbox.

    python3 -m sandbox.dry_run [--strategy .] [--corpus context/corpus_sample.jsonl] [--seed N]

It runs the strategy through the real runtime (a child process, as the host's executor does) and
checks the shape of every record it wrote, so the agent sees its mistakes before it submits. It
is a courtesy, not the judge: after the agent stops, the host runs the full checker (schemas,
duplicate ids, canonical bytes, profile) on the whole corpus, in its own sandbox run. Only the
standard library is used here, because the sandbox image carries no schema library.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

KEYS = {"sft": ("id", "messages"), "rl": ("id", "messages", "reference", "reward"), "memory": ("id", "key", "content")}
REWARDS = ("tool_call_match", "state_match")


def record_error(kind: str, record) -> str | None:
    """Why a record would certainly fail the host's checker, or None (the host checks more)."""
    if not isinstance(record, dict):
        return "a record must be a JSON object"
    missing = [k for k in KEYS[kind] if k not in record]
    if missing:
        return f"missing {', '.join(missing)}"
    if not isinstance(record["id"], str) or not record["id"]:
        return "id must be a non-empty string"
    if kind == "memory":
        return None if isinstance(record["key"], str) and isinstance(record["content"], str) else "key and content must be strings"
    messages = record["messages"]
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        return "messages must be a list of chat messages with roles"
    assistants = sum(m["role"] == "assistant" for m in messages)
    if kind == "sft":
        weights = record.get("weights")
        if assistants == 0:
            return "an SFT record needs at least one assistant message"
        if weights is not None and (len(weights) != assistants or any(w not in (0, 1) for w in weights)):
            return f"weights must hold one 0 or 1 per assistant message ({assistants})"
        return None
    if not messages or messages[-1]["role"] == "assistant":
        return "an RL prefix must end right before an assistant turn"
    if record["reward"] not in REWARDS:
        return f"reward must be one of {', '.join(REWARDS)}"
    reference = record["reference"]
    if not isinstance(reference, dict) or not ({"tool_calls", "content"} & set(reference)):
        return "reference must hold tool_calls or content"
    return None


def check(out: Path) -> tuple[dict, list[str]]:
    """Per artifact: (records, trained turns), and the first errors found."""
    summary, errors = {}, []
    for kind in ("sft", "rl", "memory"):
        seen, turns, count = set(), 0, 0
        path = out / f"{kind}.jsonl"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if path.exists() else ():
            count += 1
            try:
                record = json.loads(line)
            except ValueError as exc:
                errors.append(f"{kind}.jsonl:{n}: not JSON ({exc})")
                continue
            why = record_error(kind, record)
            if why is None and record["id"] in seen:
                why = f"duplicate id {record['id']!r}"
            if why:
                errors.append(f"{kind}.jsonl:{n}: {why}")
                continue
            seen.add(record["id"])
            if kind != "memory":
                turns += sum(m["role"] == "assistant" for m in record["messages"]) + (kind == "rl")
        summary[kind] = {"records": count, "turns": turns}
    return summary, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbox.dry_run", description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", type=Path, default=Path("."))
    parser.add_argument("--corpus", type=Path, default=Path("context/corpus_sample.jsonl"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dry-run-") as tmp:
        budget = args.strategy / "context" / "budget.json"   # ctx.budget, as the loop's dry run gives it
        extra = ["--budget", budget.read_text()] if budget.is_file() else []
        run = subprocess.run([sys.executable, "-m", "sandbox.runtime", "--strategy", str(args.strategy.resolve()),
                              "--corpus", str(args.corpus.resolve()), "--out", tmp, "--seed", str(args.seed), *extra],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"DRY RUN FAILED: the strategy raised (exit {run.returncode})\n{run.stderr[-4000:]}")
            return 1
        summary, errors = check(Path(tmp))
    cost = summary["sft"]["turns"] + summary["rl"]["turns"]
    print(f"sft {summary['sft']['records']} records, rl {summary['rl']['records']} records, "
          f"memory {summary['memory']['records']} records; Cost_train on this sample = {cost} turns")
    if errors:
        print(f"DRY RUN FAILED: {len(errors)} bad record(s):\n" + "\n".join(errors[:10]))
        return 1
    print("DRY RUN OK (on the sample; the host checks the whole corpus after you submit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
