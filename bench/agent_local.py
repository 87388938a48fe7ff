"""The code agent on a real local model server against the offline proposer, the same tiny run each:
proposals per epoch, the share that pass the checks, LLM tokens in and out, the server's tokens/s,
time per epoch, what the LLM diagnosis said beside the rule-based one on the same failures, and the
agent run's offline rerun (server stopped) compared with it. Issue 73 item 4.

    .venv/bin/python bench/agent_local.py [--runs runs/agent-local] [--out FILE] [--llm-max-tokens 256]

The server is `curateevo serve` (transformers serve over the embedded SmolLM2-135M, trainer/serve.py),
started here on a free port and stopped before the offline rerun. Each run is the tiny run of
tests/test_agent_run.py (`--profile test --base tiny-random --epochs 2 --tasks 2`): the trained model
is a random one, so P says nothing here; what is measured is the LLM's side. A finished run in RUNS is
kept and read again (the measurement resumes); delete RUNS to measure anew. Run it from a tree no
one edits meanwhile (a detached worktree): it refuses to write a result when the tree changed. Writes one raw JSON
(bench/results/agent-local-DATE.json by default) with date, command, commit and machine.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from base.files import atomic_json  # noqa: E402
from bench.loop_identity import label  # noqa: E402
from evolver.store import RunStore  # noqa: E402
from trainer import devices  # noqa: E402
from experiments import journal  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUN = ["--profile", "test", "--base", "tiny-random", "--epochs", "2", "--tasks", "2", "--benchmark", "bfcl-single",
       "--batch-size", "2", "--corpus", str(ROOT / "environments" / "data" / "sample_corpus.jsonl")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run(runs: Path, name: str, flags: list[str]) -> Path:
    """`curateevo run` as a child process (its own threads and memory), once: a finished run is kept."""
    root = runs / name
    if not _finished(root):
        cmd = [sys.executable, "-m", "evolver.cli", "run", *RUN, *flags, "--runs-dir", str(runs), "--name", name]
        subprocess.run(cmd, cwd=ROOT, check=True)
    return root


def _finished(root: Path) -> bool:
    if not (root / "run.json").is_file():
        return False
    return bool(journal.done(RunStore.open(root).journal.events(), "final"))


def _seconds(a: str, b: str) -> float:
    return (datetime.datetime.fromisoformat(b) - datetime.datetime.fromisoformat(a)).total_seconds()


def epochs(root: Path) -> list[dict]:
    """Per epoch: wall seconds (first stage started to last done), the proposals and how many passed
    the checks, and the LLM usage of its stages (calls, tokens in and out, seconds, cut replies)."""
    events = list(RunStore.open(root).journal.events())
    out = []
    for epoch in sorted({e.epoch for e in events if isinstance(e.epoch, int) and e.epoch >= 0}):
        mine = [e for e in events if e.epoch == epoch and e.time]
        usage = {e.stage: e.llm for e in journal.done(mine) if e.llm}
        proposals_file = root / "epochs" / str(epoch) / "evolve" / "proposals.json"
        proposals = json.loads(proposals_file.read_text()) if proposals_file.is_file() else []
        passed = [p for p in proposals if not p.get("error") and p.get("validated", p.get("dry_run") == "changed")]
        decide = journal.results(mine, "decide")
        out.append({
            "epoch": epoch, "wall_s": _seconds(mine[0].time, mine[-1].time) if mine else None,
            "proposals": len(proposals), "passed_checks": len(passed),
            "refused": [p.get("error") for p in proposals if p.get("error")][:8],
            "accepted": decide[0].get("accepted") if decide else None,
            "llm": {stage: {k: u.get(k) for k in ("calls", "prompt_tokens", "completion_tokens", "wall_s", "cut",
                                                   "retries")} for stage, u in sorted(usage.items())}})
    return out


def diagnosis(root: Path, epoch: int = 0) -> dict:
    """The failed points of one epoch's diagnosis by source: the rule families and the LLM's."""
    path = root / "epochs" / str(epoch) / "diagnosis" / "failed_points.json"
    if not path.is_file():
        return {}
    points = json.loads(path.read_text())
    points = points.get("failed_points", points) if isinstance(points, dict) else points
    by = {}
    for p in points:
        by.setdefault(p.get("source", "rules"), []).append({k: p.get(k) for k in ("family", "count", "curation_hint")})
    return by


def fingerprint(root: Path) -> dict:
    """What an offline rerun must reproduce: the decisions and every artifact's bytes."""
    decisions = [{k: r.get(k) for k in ("accepted", "P", "C", "J", "commit")}
                 for r in journal.results(RunStore.open(root).journal.events(), "decide")]
    artifacts = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in sorted(root.glob("epochs/*/artifacts/*")) if p.is_file() and p.name != "execution.json"}
    return {"decisions": decisions, "artifacts": artifacts}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "agent-local")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--llm-max-tokens", type=int, default=256)
    parser.add_argument("--agent-steps", type=int, default=12)
    args = parser.parse_args(argv)
    from trainer import serve

    args.runs.mkdir(parents=True, exist_ok=True)
    commit = label(ROOT)
    offline = run(args.runs, "offline", [])
    proc, url, model = serve.start(port=free_port(), log=args.runs / "server.log")
    try:
        agent = run(args.runs, "agent", ["--model", model, "--base-url", url, "--llm-max-tokens",
                                         str(args.llm_max_tokens), "--agent-steps", str(args.agent_steps)])
    finally:
        serve.stop(proc)
    rerun = run(args.runs, "agent-offline", ["--model", model, "--base-url", url, "--llm-max-tokens",
                                             str(args.llm_max_tokens), "--agent-steps", str(args.agent_steps),
                                             "--llm-mode", "offline", "--llm-records", str(agent / "llm")])
    if label(ROOT) != commit:   # the runs must all run one tree: run this from a detached worktree
        raise SystemExit(f"the tree changed while measuring ({commit} → {label(ROOT)}): measure again from a "
                         "worktree no one edits (git worktree add --detach DIR; PYTHONPATH=DIR python DIR/bench/agent_local.py)")
    sides = {name: epochs(root) for name, root in (("agent", agent), ("offline", offline))}
    llm = [u for e in sides["agent"] for u in e["llm"].values()]
    tokens_out, seconds = sum(u["completion_tokens"] or 0 for u in llm), sum(u["wall_s"] or 0 for u in llm)
    result = {
        "what": "the code agent and the LLM diagnosis on a real local server (transformers serve, SmolLM2-135M, "
                "greedy) against the offline proposer and the rule-based diagnosis: the same 2-epoch tiny run",
        "date": datetime.date.today().isoformat(),
        "command": "python bench/agent_local.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit, "machine": devices.machine(), "server": {"model": model, "command": "curateevo serve"},
        "run_flags": RUN, "llm_max_tokens": args.llm_max_tokens, "agent_steps": args.agent_steps,
        "epochs": sides,
        "server_tokens_per_s": round(tokens_out / seconds, 2) if seconds else None,
        "llm_totals": {"calls": sum(u["calls"] or 0 for u in llm),
                       "prompt_tokens": sum(u["prompt_tokens"] or 0 for u in llm), "completion_tokens": tokens_out,
                       "wall_s": round(seconds, 1)},
        "diagnosis_epoch0": {"agent run (rules+llm)": diagnosis(agent), "offline run (rules)": diagnosis(offline)},
        "offline_rerun_identical": fingerprint(rerun) == fingerprint(agent),
    }
    out = args.out or ROOT / "bench" / "results" / f"agent-local-{result['date']}.json"
    atomic_json(out, result)
    print(json.dumps({k: result[k] for k in ("server_tokens_per_s", "llm_totals", "offline_rerun_identical")}))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
