"""Host checker throughput (records/s) and the checking process's peak RSS on a curation output.

    .venv/bin/python bench/checker_throughput.py OUT_DIR [--repeats 5]

OUT_DIR holds sft.jsonl, rl.jsonl and memory.jsonl (a `curateevo curate --out` directory). Each
repeat streams them through `checker.check_output` into a scratch directory in a fresh process
(its token memo empty, as one curation's is); the peak RSS is the largest of the repeats'.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

def once(out_dir: Path) -> dict:
    """One check of `out_dir` in this process: its seconds, records and peak RSS."""
    from sandbox import checker

    with tempfile.TemporaryDirectory() as dest:
        t0 = time.perf_counter()
        checked = checker.check_output(out_dir, Path(dest), [])
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "records": sum(a["count"] for a in checked.artifacts.values()), "rss": _peak_rss()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)   # one repeat, as JSON (a child)
    args = ap.parse_args()
    if args.once:
        print(json.dumps(once(args.out_dir)))
        return
    runs = [json.loads(subprocess.run([sys.executable, __file__, str(args.out_dir), "--once"], check=True,
                                      capture_output=True, text=True).stdout) for _ in range(args.repeats)]
    median, n = statistics.median(r["seconds"] for r in runs), runs[-1]["records"]
    print(f"records {n}; median {median:.3f} s; {n / median:.0f} records/s; "
          f"peak RSS {max(r['rss'] for r in runs) / 2**20:.0f} MiB")


def _peak_rss() -> int:
    """VmHWM of this process (ru_maxrss would keep a forking parent's peak across exec)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


if __name__ == "__main__":
    main()
