"""Host checker throughput (records/s) and the checking process's peak RSS on a curation output.

    .venv/bin/python bench/checker_throughput.py OUT_DIR [--repeats 5]

OUT_DIR holds sft.jsonl, rl.jsonl and memory.jsonl (a `curateevo curate --out` directory). Each
repeat streams them through `checker.check_output` into a scratch directory with the token
memo cleared, as one curation would.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox import checker, sigma  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    times, n = [], 0
    for _ in range(args.repeats):
        sigma._tokens.cache_clear()
        with tempfile.TemporaryDirectory() as dest:
            t0 = time.perf_counter()
            checked = checker.check_output(args.out_dir, Path(dest), [])
            times.append(time.perf_counter() - t0)
        n = sum(a["count"] for a in checked.artifacts.values())
    median = statistics.median(times)
    print(f"records {n}; median {median:.3f} s; {n / median:.0f} records/s; "
          f"peak RSS {_peak_rss() / 2**20:.0f} MiB")


def _peak_rss() -> int:
    """VmHWM of this process (ru_maxrss would keep a forking parent's peak across exec)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


if __name__ == "__main__":
    main()
