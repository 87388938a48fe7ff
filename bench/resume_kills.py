"""Resume after kills at random points: the sweep behind tests/test_resume.py's one kill.

An uninterrupted reference run, then for each seed a run of the same settings SIGKILLed (its whole
process group) after a random 4-25 s, resumed and killed again up to `--kills` times (a kill before
the run folder is whole starts the run afresh), then left to finish; each must end with the
reference's decisions, commits, edits and artifact bytes (tests/test_resume.py's `fingerprint`).

    .venv/bin/python bench/resume_kills.py [--seeds 7 8 9] [--kills 8]

The run is the resume tests' (`test` profile, tiny-random base, 3 epochs, 2 dev tasks). The
result goes to bench/results/resume-kills.json; the exit status is 1 when any seed differs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_resume import ARGS, fingerprint  # noqa: E402  (the test's settings and what must not change)


def cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "evolver.cli", *argv]


def killed_run(runs: Path, seed: int, kills: int) -> dict:
    """A run killed `kills` times at random points, then finished by `resume`; what it went through."""
    rng = random.Random(seed)
    root = runs / f"k{seed}"
    command = cli("run", *ARGS, "--runs-dir", str(runs), "--name", root.name)
    done_kills, t0 = 0, time.monotonic()
    while True:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=rng.uniform(4, 25) if done_kills < kills else 1800)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            done_kills += 1
            time.sleep(0.5)
            command = cli("resume", str(root))
            if not (root / "run.json").exists():   # killed before the run directory was whole
                shutil.rmtree(root, ignore_errors=True)
                command = cli("run", *ARGS, "--runs-dir", str(runs), "--name", root.name)
            continue
        if proc.returncode != 0:
            raise SystemExit(f"seed {seed}: the run exited with status {proc.returncode}")
        return {"seed": seed, "kills": done_kills, "wall_s": round(time.monotonic() - t0, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[7])
    parser.add_argument("--kills", type=int, default=8, help="kills per run before it may finish (default 8)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "resume-kills.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="curateevo-bench-resume-") as tmp:
        runs = Path(tmp)
        subprocess.run(cli("run", *ARGS, "--runs-dir", str(runs), "--name", "reference"), cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        reference = fingerprint(runs / "reference")
        results = []
        for seed in args.seeds:
            result = killed_run(runs, seed, args.kills)
            result["same_as_uninterrupted"] = fingerprint(runs / f"k{seed}") == reference
            print(json.dumps(result), flush=True)
            results.append(result)
    doc = {"runs": results, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if all(r["same_as_uninterrupted"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
