"""`run` SIGKILLed in its first moments, many times: the sweep behind tests/test_run_creation.py's one kill.

Each try starts `curateevo run` (the test's cheap settings), waits until the runs folder exists (made
just before the run directory is built), sleeps a random 0-0.3 s and SIGKILLs it; the run directory
must then be whole (its run.json written) or absent. The exact points inside the creation are
tests/test_run_creation.py's test_a_create_killed_at_any_point_….

    .venv/bin/python bench/creation_kills.py [--tries 20] [--seed 46]

The exit status is 1 when any try left a run directory without its run.json.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def killed_start(tmp: Path, rng: random.Random, args: list[str]) -> list[str] | None:
    """`run ARGS` killed in its first moments; the names in its directory when it is half made, else None."""
    runs = tmp / "runs"
    child = subprocess.Popen([sys.executable, "-m", "evolver.cli", "run", *args, "--runs-dir", str(runs), "--name", "r"],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "TMPDIR": str(tmp)})
    deadline = time.monotonic() + 60
    while not runs.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)   # the runs folder is made just before the run directory is built
    time.sleep(rng.uniform(0, 0.3))
    child.send_signal(signal.SIGKILL)
    child.wait()
    run = runs / "r"
    return sorted(p.name for p in run.iterdir()) if run.exists() and not (run / "run.json").is_file() else None


def main() -> int:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from test_run_creation import CHEAP   # the test's settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--seed", type=int, default=46)
    args = parser.parse_args()
    rng, bad = random.Random(args.seed), 0
    for i in range(args.tries):
        with tempfile.TemporaryDirectory() as tmp:
            half = killed_start(Path(tmp), rng, CHEAP)
        bad += half is not None
        print(f"try {i}: " + ("whole or none" if half is None else f"HALF-MADE: {half}"), flush=True)
    print(f"{bad} of {args.tries} tries left a half-made run")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
