"""The same tiny run at two commits, compared: does a change to the loop leave its behaviour as it was?

    python bench/loop_identity.py --before 3354f4e [--after WORKTREE|REV] [--out DIR] [--compare-only] [-- RUN FLAGS]

Each side runs `curateevo run` (default: tests/test_resume.py's `--profile test --base tiny-random
--epochs 3 --tasks 2 --margin 0.001` on the bundled sample corpus, copied once to DIR so both runs
name the same corpus path) from its own tree: a revision is checked out as a detached git
worktree under DIR; `--after` defaults to this script's tree. Compared, per side: the strategy
repository's refs (every candidate commit and decision tag), every epoch's decision (accepted, P, C,
J, reason, edits), the sha256 of every artifact file, adapter weights and config, evaluation
trajectories and diagnosis file, and the journal's stage results less what measures time. A
manifest.json that differs only in its runtime hash (a runtime source moved: the hash keys files
by path) is listed apart, with both hashes, and does not count as a difference. Prints one JSON
object; exit status 0 when every compared item is equal, 1 otherwise.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# tests/test_resume.py's run: at least two accepts and one rejection
RUN = ["--profile", "test", "--base", "tiny-random", "--epochs", "3", "--tasks", "2", "--sandbox", "process",
       "--benchmark", "bfcl-single", "--margin", "0.001", "--batch-size", "2"]
# what a journal result holds that measures the machine, not the run's behaviour: times, rates, memory
# (GRPO's per-step profile, trainer/grpo.py, included)
TIMING_KEYS = {"time", "wall_s", "seconds", "timing", "elapsed_s", "peak_memory_mb", "step_generation_s", "step_update_s"}
HASHED = ("artifacts/sft.jsonl", "artifacts/rl.jsonl", "artifacts/memory.jsonl", "artifacts/profile.json",
          "artifacts/manifest.json", "train-s*/adapter/adapter_model.safetensors", "train-s*/adapter/adapter_config.json",
          "eval-s*/trajectories.jsonl", "sample-s*/trajectories.jsonl", "diagnosis/*.json", "evolve/proposals.json")


def tree_of(rev: str, out: Path) -> Path:
    """A checkout of `rev` (a detached worktree under `out`), or `rev` itself when it is a directory."""
    if Path(rev).is_dir():
        return Path(rev).resolve()
    tree = out / f"tree-{rev}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                       stdout=subprocess.DEVNULL)
    return tree


def run(tree: Path, runs: Path, corpus: Path, flags: list[str], reuse: bool) -> Path:
    """`curateevo run` from `tree`'s sources (its modules first on the path), into `runs/r`; with
    `reuse`, a finished run already there (same flags) is taken as it is."""
    journal = runs / "r" / "journal.jsonl"
    finished = journal.exists() and '"stage": "final"' in journal.read_text() and \
        json.loads((runs / "flags.json").read_text()) == flags
    if not (reuse and finished):
        shutil.rmtree(runs, ignore_errors=True)
        runs.mkdir(parents=True)
        (runs / "flags.json").write_text(json.dumps(flags))
        (runs / "commit.txt").write_text(label(tree))
        args = ["run", *flags, "--corpus", str(corpus), "--runs-dir", str(runs), "--name", "r"]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        code = f"import sys; from evolver import cli; sys.exit(cli.main({args!r}))"
        subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, check=True, stdout=sys.stderr)   # stdout: the report
    return runs / "r"


def label(tree: Path) -> str:
    """The tree's commit, `+changes` when its tracked files differ from it."""
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return f"{commit[:10]}{'+changes' if dirty else ''}"


def without_timing(value):
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in TIMING_KEYS and not k.endswith("_per_s")}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def without_runtime(path: Path) -> tuple[str, str | None]:
    """(sha256 of a manifest.json less its runtime hash, that runtime hash): a pure move of a runtime
    source changes the hash (sandbox.curate.runtime_sha256 keys files by path) and nothing else."""
    def strip(value, found):
        if isinstance(value, dict):
            found.extend(v for k, v in value.items() if k == "runtime_sha256")
            return {k: strip(v, found) for k, v in value.items() if k != "runtime_sha256"}
        return [strip(v, found) for v in value] if isinstance(value, list) else value
    found: list = []
    rest = strip(json.loads(path.read_text()), found)
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest(), (found or [None])[0]


def fingerprint(root: Path) -> dict:
    # the run's own folder named in a result (an adapter's path) is the same place on both sides
    text = (root / "journal.jsonl").read_text().replace(json.dumps(str(root.resolve()))[1:-1], "RUN")
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    done = [e for e in events if e.get("event") == "stage_done"]
    refs = subprocess.run(["git", "-C", str(root / "strategy"), "for-each-ref", "--format=%(refname) %(objectname)"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    files = {}
    for epoch in sorted((root / "epochs").iterdir(), key=lambda p: int(p.name)):
        for pattern in HASHED:
            for path in sorted(epoch.glob(pattern)):
                files[f"{epoch.name}/{path.relative_to(epoch)}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifests = {f"{epoch.name}/artifacts/manifest.json": without_runtime(epoch / "artifacts" / "manifest.json")
                 for epoch in sorted((root / "epochs").iterdir(), key=lambda p: int(p.name))
                 if (epoch / "artifacts" / "manifest.json").is_file()}
    return {
        "strategy_refs": refs,
        "decisions": {e["epoch"]: {k: e["result"].get(k) for k in ("accepted", "commit", "P", "C", "J", "reason", "edits")}
                      for e in done if e["stage"] == "decide"},
        "files": files,
        "journal": [{"epoch": e["epoch"], "stage": e["stage"], "result": without_timing(e["result"])} for e in done],
        "stages": [(e.get("event"), e.get("epoch"), e.get("stage")) for e in events],
        "manifests": manifests,
    }


def compare(before: dict, after: dict) -> dict:
    report = {}
    for key in before:
        a, b = before[key], after[key]
        if key == "manifests":
            continue
        if key == "files":
            differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            ma, mb = before.get("manifests", {}), after.get("manifests", {})
            moved = [k for k in differ if k in ma and k in mb and ma[k][0] == mb[k][0]]
            report[key] = {"compared": len(set(a) | set(b)), "different": [k for k in differ if k not in moved]}
            if moved:   # the manifests differ in the runtime hash alone: say so, with both hashes
                report[key]["different_only_in_runtime_sha256"] = moved
                report["runtime_sha256"] = {"before": sorted({ma[k][1] for k in moved}),
                                            "after": sorted({mb[k][1] for k in moved})}
        elif key == "journal":
            differ = [(x["epoch"], x["stage"]) for x, y in zip(a, b) if x != y] + (["length"] if len(a) != len(b) else [])
            report[key] = {"compared": len(a), "different": differ}
        else:
            report[key] = {"compared": len(a), "equal": a == b}
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the revision (or tree) before the change")
    parser.add_argument("--after", default=str(ROOT), help="the revision or tree after it (default: this tree)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "loop-identity")
    parser.add_argument("--compare-only", action="store_true", help="compare the runs already in OUT, run nothing")
    parser.add_argument("flags", nargs="*", help="`curateevo run` flags (after --) instead of the tiny run's")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()   # the runs start in another tree
    args.out.mkdir(parents=True, exist_ok=True)
    corpus = args.out / "sample_corpus.jsonl"
    if not corpus.exists():
        shutil.copyfile(ROOT / "environments" / "data" / "sample_corpus.jsonl", corpus)
    flags = args.flags or RUN
    prints = {}
    for side, rev in (("before", args.before), ("after", args.after)):
        tree = tree_of(rev, args.out)
        # a revision's run is kept for the next comparison; a working tree may have changed since
        root = args.out / side / "r" if args.compare_only else \
            run(tree, args.out / side, corpus, flags, reuse=not Path(rev).is_dir())
        made = root.parent / "commit.txt"   # the commit the run was made at
        prints[side] = (made.read_text().strip() if made.is_file() else label(tree), fingerprint(root))
    report = {"run": flags, "before": prints["before"][0], "after": prints["after"][0],
              **compare(prints["before"][1], prints["after"][1]),
              "decided": {e: d["accepted"] for e, d in prints["after"][1]["decisions"].items()}}
    same = all(v.get("equal", True) and not v.get("different") for v in report.values() if isinstance(v, dict)
               and ("equal" in v or "different" in v))
    print(json.dumps({**report, "identical": same}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
