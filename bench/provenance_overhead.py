"""What provenance costs (issue 29): curation time and artifact size with and without it, in one run.

    .venv/bin/python bench/provenance_overhead.py [--corpus F] [--repeats 5] [--json OUT]

Per strategy (ρ0, and the augment reference strategy, whose adding operators stamp the most), the
strategy is called in process on the corpus, its records written as the runtime writes them and
checked by the host into artifact files (`sandbox.checker.check_output`: schemas, canonical
bytes, profile — where the stamp is checked and stored), with the toolkit's stamping and the
host's check on, then off (both replaced by the identity), interleaved `--repeats` times; the
medians are compared. The executor's constant cost (a container or a bwrap start) is left out, so
the share is an upper bound of what a sandboxed curation pays. The outcome delta's share is the
time of the outcome delta of one edit (ρ0 → augment: `evolver.lineage.record_changes`, which parses
only the rows whose bytes differ), as the diagnosis computes it once per evaluated candidate,
against the candidate's curation in process.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from curation_strategies import toolkit  # noqa: E402
from evolver.lineage import record_changes  # noqa: E402
from sandbox import artifact_records, checker  # noqa: E402
from sandbox.runtime import Context, load_strategy, write_records  # noqa: E402
from sandbox import exchange  # noqa: E402

DEFAULT_CORPUS = ROOT / "runs" / "corpora" / "bfcl-single-wild-seed0-max280" / "corpus.jsonl"   # the default run's (cpu-small)
STRATEGIES = {"seed": ROOT / "curation_strategies" / "seed", "augment": ROOT / "curation_strategies" / "augment"}
KINDS = ("sft", "rl", "memory")


def stamping(on: bool) -> None:
    """The toolkit's stamps and the host's check of them on, or replaced by the identity."""
    import curation_strategies.toolkit.provenance as tp

    for name, module in list(sys.modules.items()):
        if name.startswith("curation_strategies.toolkit") and hasattr(module, "stamp"):
            module.stamp = tp.stamp if on else (lambda record, *made, **kw: record)
    artifact_records.settle = stamping.settle if on else (lambda record: record)


def curate_once(strategy: Path, raw: tuple, folder: Path) -> tuple[float, int]:
    """(seconds, artifact bytes) of one curation: strategy, write, host check."""
    out, dest = folder / "out", folder / "artifacts"
    for d in (out, dest):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    t0 = time.perf_counter()
    curated = load_strategy(strategy).curate(raw, Context({}, 0, toolkit))
    write_records(out, curated)
    checker.check_output(out, dest, [r["id"] for r in raw], encode=exchange.to_file)
    seconds = time.perf_counter() - t0
    return seconds, sum((dest / f"{k}.jsonl").stat().st_size for k in KINDS)


def sandboxed_seconds(strategy: Path, corpus: Path, folder: Path, repeats: int) -> float:
    """Median wall time of the strategy's curation as a run does it (sandbox.curate.execute with the
    default executor: staging, sandboxed execution, the host's check), the denominator a run sees."""
    from corpora import load_corpus
    from sandbox.curate import execute, make_executor
    from sandbox.strategy_files import strategy_files
    from trainer.recipe import curation_budget, get_profile

    files, raw = strategy_files(strategy), load_corpus([str(corpus)])
    executor, seconds = make_executor("auto"), []
    for k in range(repeats):
        t0 = time.perf_counter()
        execute(files, raw, folder / str(k), seed=0, executor=executor, budget=curation_budget(get_profile("cpu-small")))
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path, help="write the numbers here too")
    args = ap.parse_args()
    from base.provenance import settle
    stamping.settle = settle
    raw = tuple(json.loads(line) for line in args.corpus.open(encoding="utf-8"))
    work = Path(tempfile.mkdtemp(prefix="curateevo-provenance-"))
    results = {"corpus": str(args.corpus), "records": len(raw), "repeats": args.repeats, "strategies": {}}
    try:
        for name, strategy in STRATEGIES.items():
            times, size = {True: [], False: []}, {}
            for _ in range(args.repeats):   # interleaved, so machine load hits both alike
                for on in (True, False):
                    stamping(on)
                    seconds, size[on] = curate_once(strategy, raw, work / ("on" if on else "off"))
                    times[on].append(seconds)
            on, off = statistics.median(times[True]), statistics.median(times[False])
            results["strategies"][name] = {
                "seconds_with": round(on, 3), "seconds_without": round(off, 3), "time_overhead": round(on / off - 1, 4),
                "bytes_with": size[True], "bytes_without": size[False], "size_overhead": round(size[True] / size[False] - 1, 4)}
            shutil.copytree(work / "on" / "artifacts", work / f"{name}-artifacts")
        stamping(True)   # the loop above ends with it off
        # The outcome delta of the edit seed → augment, as the diagnosis computes it once per
        # evaluated candidate (evolver.lineage.record_changes), against the candidate's curation.
        seconds = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            added, removed, changed = record_changes(work / "seed-artifacts", work / "augment-artifacts")
            seconds.append(time.perf_counter() - t0)
        delta_s, curation_s = statistics.median(seconds), results["strategies"]["augment"]["seconds_with"]
        sandboxed = sandboxed_seconds(STRATEGIES["augment"], args.corpus, work / "sandboxed", args.repeats)
        results["delta"] = {"edit": "seed -> augment", "seconds": round(delta_s, 4), "share_of_curation": round(delta_s / curation_s, 4),
                            "sandboxed_curation_seconds": round(sandboxed, 3), "share_of_sandboxed_curation": round(delta_s / sandboxed, 4),
                            "added": len(added), "removed": len(removed), "changed": len(changed)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{results['records']} raw records ({args.corpus}), median of {args.repeats}, in process (no executor)")
    print(f"{'strategy':<9} {'s without':>9} {'s with':>8} {'time':>7} {'bytes without':>14} {'bytes with':>11} {'size':>7}")
    for name, r in results["strategies"].items():
        print(f"{name:<9} {r['seconds_without']:>9.3f} {r['seconds_with']:>8.3f} {r['time_overhead']:>+7.1%} "
              f"{r['bytes_without']:>14,} {r['bytes_with']:>11,} {r['size_overhead']:>+7.1%}")
    d = results["delta"]
    print(f"outcome delta of the edit {d['edit']} ({d['added']} records added, {d['removed']} removed, {d['changed']} changed): "
          f"{d['seconds']:.3f} s = {d['share_of_curation']:.1%} of augment's curation in process, "
          f"{d['share_of_sandboxed_curation']:.1%} of its curation as a run does it ({d['sandboxed_curation_seconds']:.2f} s, sandboxed)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
