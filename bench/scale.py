"""The cost curve of curation with corpus size: generated corpora of 10^3..10^6 trajectories (and
long coding-agent sessions), each through corpus loading and the split by task, `curate` with the
seed and a reference strategy (the host's check inside it), and `replay`.

    .venv/bin/python bench/scale.py --sizes 1000 10000 [--shape short|long] [--sandbox process] [--strategies seed agentrefine]
        [--work /tmp/curateevo-scale] [--json bench/results/scale-DATE.json] [--keep] [--no-run] [--no-replay [STRATEGY ...]]
        [--replay-hashes] [--profile test]

Each step runs as its own process, so its wall time and peak resident memory (its own VmHWM,
which the step reports on leaving) are its own; the sandbox's peak is what the runtime reported (execution.json). Per size it records
wall time, seconds per 1K records and per 1K retained turns (the profile's cost_train: the
paper's unit, 405 s per 1K there), peak memory of host and sandbox, and the bytes written.
Resumable: a size's result is kept in WORK/<shape>-<n>/result.json and not measured again; its
corpus and outputs are deleted once measured (--keep keeps them). A size whose corpus would not
fit the free disk is skipped and said so, and so is a replay that would not fit beside its
curation's outputs (each step's disk peak is measured: `DiskPeak`). Corpora: bench/scale_corpus.py. `--profile NAME` curates
with that profile's ctx.budget, as a run's curation stage does (`curate --profile`): ρ0 then bounds
its RL prompts (toolkit.rl.recent_prefix), which long sessions need; without it, no budget.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import scale_corpus  # noqa: E402
from bench.loop_identity import label  # noqa: E402
from sandbox.manifest import Manifest  # noqa: E402

STRATEGIES = {"seed": ROOT / "curation_strategies" / "seed", "agentrefine": ROOT / "curation_strategies" / "agentrefine"}


PEAK = "[scale step] peak resident memory: "


class DiskPeak:
    """The most disk the filesystems of `folders` had in use beyond what they had at the start,
    sampled every `every` seconds in a thread: a step's peak on disk (scratch files, copies and
    what it keeps), not only what it leaves. Other writers on those disks count too."""

    def __init__(self, folders: list[Path], every: float = 0.25):
        self.devices = {}
        for folder in folders:
            self.devices.setdefault(os.stat(folder).st_dev, folder)
        self.every, self.peak, self.done = every, 0, threading.Event()
        self.start = self._used()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _used(self) -> int:
        return sum(shutil.disk_usage(folder).used for folder in self.devices.values())

    def _watch(self) -> None:
        while not self.done.wait(self.every):
            self.peak = max(self.peak, self._used() - self.start)

    def __enter__(self) -> "DiskPeak":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, self._used() - self.start)


def measured(argv: list[str], log: Path) -> dict:
    """Run one step as a child process: exit code, wall seconds, its peak resident memory — the high-water
    mark of its own memory (VmHWM) the step reports on leaving; wait4's ru_maxrss (kept beside it) also
    counts what this process held when it forked the child — and its peak use of disk (`DiskPeak`: the
    folder of its log, where its outputs go, and the temporary folder, where its sandbox job goes)."""
    started = time.monotonic()
    with open(log, "wb") as out, DiskPeak([log.parent, Path(tempfile.gettempdir())]) as disk:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        _, status, usage = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    text = log.read_text(errors="replace")
    own = [int(line.split(PEAK, 1)[1]) for line in text.splitlines() if line.startswith(PEAK)]
    step = {"rc": rc, "wall_s": round(time.monotonic() - started, 3), "host_peak_rss_bytes": own[-1] if own else
            usage.ru_maxrss * 1024, "wait4_maxrss_bytes": usage.ru_maxrss * 1024, "disk_peak_bytes": disk.peak}
    if rc != 0:
        step["error"] = [line for line in text.strip().splitlines() if not line.startswith(PEAK)][-1:]
    return step


def report_peak() -> None:
    """The step's own high-water mark (Linux's VmHWM) as the last line of its log."""
    with open("/proc/self/status", encoding="ascii") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(f"{PEAK}{kib * 1024}", flush=True)


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def load_split(corpus: str) -> None:
    """The `_load_split` step: load the corpus and take the train part, as `curate` and `run` do."""
    from corpora import load_corpus, train_part

    loaded = load_corpus([corpus])
    print(json.dumps({"records": len(loaded.records), "train": len(train_part(loaded).records)}))


def curate(strategy: str, corpus: str, out: str, sandbox: str, profile: str = "") -> None:
    """The `_curate` step: what `curate` and the loop's curation stage do (load, split, stage, sandbox,
    the host's check), without the CLI's length report (a tokenizer's load and a sample of the records)."""
    from corpora import load_corpus, train_part
    from sandbox.curate import execute
    from sandbox.executor import Limits, make_executor
    from sandbox.strategy_files import strategy_files
    from trainer.recipe import PROFILES, curation_budget

    execute(strategy_files(Path(strategy)), train_part(load_corpus([corpus])), Path(out),
            executor=make_executor(sandbox), limits=Limits(timeout_s=3600),
            budget=curation_budget(PROFILES[profile]) if profile else None)


def curate_step(name: str, corpus: Path, out: Path, sandbox: str, log: Path, profile: str = "") -> dict:
    step = measured([sys.executable, str(Path(__file__)), "_curate", str(STRATEGIES[name]), str(corpus), str(out),
                     sandbox, profile], log)
    if step["rc"] != 0:
        return step
    profile = json.loads((out / "profile.json").read_text())
    execution = json.loads((out / "execution.json").read_text())
    turns = profile["cost_train"]
    records = profile["raw"]["records"]
    step.update(records=records, retained=profile["raw"]["retained"], retained_turns=turns,
                s_per_1k_records=round(1000 * step["wall_s"] / records, 3),
                s_per_1k_turns=round(1000 * step["wall_s"] / turns, 4) if turns else None,
                # the curation alone (staging, sandbox, check), without the CLI's start and length report
                curation_s_per_1k_records=round(1000 * execution["seconds"]["total"] / records, 3),
                seconds=execution["seconds"], sandbox_peak_rss_bytes=execution["execution"].get("peak_rss_bytes"),
                disk_written_bytes=folder_bytes(out),
                artifacts={k: v["sha256"] for k, v in Manifest.read(out).artifacts.items()})
    return step


def replay_room(peak: int, folder: Path, kept: int = 0) -> str | None:
    """Why a replay cannot be measured here (None: it can): it needs the disk its curation's peak
    took, beside the outputs that curation keeps; less what it keeps (`kept`) when it compares hashes."""
    free, need = shutil.disk_usage(folder).free, 1.1 * (peak - kept)
    if free >= need:
        return None
    return (f"replay needs about {need / 2**30:.1f} GiB of disk (its curation's peak"
            f"{', less what it keeps' if kept else ''}), {free / 2**30:.1f} GiB free under {folder}")


def replay_step(out: Path, sandbox: str, log: Path, hashes: bool = False) -> dict:
    again = out.with_name(out.name + "-replay")
    step = measured([sys.executable, str(Path(__file__)), "_replay", str(out), str(again), sandbox,
                     *(["--hashes"] if hashes else [])], log)
    step["identical"] = "replay identical" in log.read_text(errors="replace")
    step["disk_written_bytes"] = folder_bytes(again)
    return step


TINY_RUN = ["--profile", "test", "--base", "tiny-random", "--epochs", "1", "--tasks", "2", "--batch-size", "2"]


def run_step(corpus: Path, runs: Path, sandbox: str, log: Path) -> dict:
    """`curateevo run` (TINY_RUN) on the corpus: wall time, host peak, and each stage's seconds (its journal)."""
    shutil.rmtree(runs, ignore_errors=True)
    step = measured([sys.executable, str(Path(__file__)), "_run", str(corpus), str(runs), sandbox], log)
    from experiments import journal

    started, stages = {}, {}
    for event in journal.read(runs / "tiny" / journal.JOURNAL_FILE):
        if isinstance(event, journal.StageStarted):
            started[event.stage] = datetime.datetime.fromisoformat(event.time)
        elif isinstance(event, journal.StageDone) and event.stage in started:
            stages[event.stage] = (datetime.datetime.fromisoformat(event.time) - started[event.stage]).total_seconds()
    step.update(stage_s=stages, disk_written_bytes=folder_bytes(runs))
    return step


def measure(shape: str, n: int, work: Path, sandbox: str, keep: bool, strategies: list[str], run: bool = True,
            no_replay: list[str] = (), profile: str = "", replay_hashes: bool = False) -> dict:
    """One size's row (read back when measured before)."""
    folder = work / f"{shape}-{n}"
    done = folder / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "corpus.jsonl"
    sample = sum(len(json.dumps(r)) + 1 for r in scale_corpus.records(shape, 50)) / 50
    need = int(sample * n * 4)   # the corpus, the sandbox's staged copy, the outputs and a replay
    free = shutil.disk_usage(folder).free
    if need > free:
        return {"shape": shape, "trajectories": n, "skipped": f"needs about {need / 2**30:.1f} GiB of disk, "
                f"{free / 2**30:.1f} GiB free under {folder}"}
    t0 = time.monotonic()
    row = {"shape": shape, "trajectories": n, "corpus_bytes": scale_corpus.write(corpus, shape, n),
           "generate_s": round(time.monotonic() - t0, 3)}
    split = measured([sys.executable, str(Path(__file__)), "_load_split", str(corpus)], folder / "load_split.log")
    if split["rc"] == 0:
        said = [line for line in (folder / "load_split.log").read_text().splitlines() if line.startswith("{")]
        split.update(json.loads(said[-1]))
    row["load_split"] = split
    for name in strategies:
        out = folder / f"curate-{name}"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(out.with_name(out.name + "-replay"), ignore_errors=True)
        row[f"curate_{name}"] = curate_step(name, corpus, out, sandbox, folder / f"curate-{name}.log", profile)
        if row[f"curate_{name}"]["rc"] == 0 and name not in no_replay:
            curated = row[f"curate_{name}"]
            short = replay_room(curated["disk_peak_bytes"], folder, curated["disk_written_bytes"] if replay_hashes else 0)
            row[f"replay_{name}"] = {"skipped": short} if short else replay_step(out, sandbox, folder / f"replay-{name}.log",
                                                                                 replay_hashes)
        print(f"{shape} {n}: {name}: {json.dumps(row[f'curate_{name}'].get('s_per_1k_records'))} s per 1K records",
              file=sys.stderr, flush=True)
    if run:
        row["tiny_run"] = run_step(corpus, folder / "runs", sandbox, folder / "run.log")
        print(f"{shape} {n}: tiny run: rc {row['tiny_run']['rc']} in {row['tiny_run']['wall_s']} s", file=sys.stderr, flush=True)
    if not keep:
        corpus.unlink()
        for name in STRATEGIES:
            shutil.rmtree(folder / f"curate-{name}", ignore_errors=True)
            shutil.rmtree(folder / f"curate-{name}-replay", ignore_errors=True)
        shutil.rmtree(folder / "runs", ignore_errors=True)
    done.write_text(json.dumps(row, indent=1, sort_keys=True))
    return row


def machine() -> dict:
    """trainer.devices.machine (the CPU, cores, ISA flags), with the memory a corpus size is held in."""
    from trainer.devices import machine as named

    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    total = [line.split()[1] for line in meminfo.splitlines() if line.startswith("MemTotal:")]
    return {**named(), **({"memory_gib": round(int(total[0]) / 2**20, 1)} if total else {})}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["_load_split"], ["_curate"], ["_replay"], ["_run"]):   # a step, in its own process
        try:
            if argv[0] == "_load_split":
                load_split(argv[1])
                return 0
            if argv[0] == "_curate":
                curate(*argv[1:6])
                return 0
            from evolver import cli   # `curateevo replay` / `run` as a user runs them

            if argv[0] == "_run":
                return cli.main(["run", "--corpus", argv[1], *TINY_RUN, "--sandbox", argv[3], "--runs-dir", argv[2],
                                 "--name", "tiny"])
            return cli.main(["replay", argv[1], "--out", argv[2], "--sandbox", argv[3], *argv[4:5]])
        finally:
            report_peak()
    today = datetime.date.today().isoformat()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--shape", choices=scale_corpus.SHAPES, default="short")
    ap.add_argument("--sandbox", default="process", choices=("auto", "docker", "process"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/curateevo-scale"))
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / f"scale-{today}.json")
    ap.add_argument("--keep", action="store_true", help="keep each size's corpus and outputs under --work")
    ap.add_argument("--strategies", nargs="*", choices=list(STRATEGIES), default=list(STRATEGIES),
                    help="the strategies curated (none: only loading, the split and the tiny run)")
    ap.add_argument("--no-run", action="store_true", help="leave out the tiny `run` step")
    ap.add_argument("--no-replay", nargs="*", choices=list(STRATEGIES), default=None, metavar="STRATEGY",
                    help="leave out `replay` (it takes as long as the curation): of these strategies, or of all")
    ap.add_argument("--replay-hashes", action="store_true", help="replay with --hashes: the record files compared by "
                    "sha256 as they are checked, no copy kept (for outputs a second copy of which would not fit)")
    ap.add_argument("--profile", default="", help="curate with this profile's ctx.budget, as a run's curation stage "
                    "does (default: none, as plain `curate`)")
    args = ap.parse_args(argv)
    if any(n < 1 for n in args.sizes):
        ap.error("--sizes: each size is a number of trajectories, at least 1")
    rows = []
    for n in sorted(args.sizes):
        rows.append(measure(args.shape, n, args.work, args.sandbox, args.keep, args.strategies, not args.no_run,
                            [] if args.no_replay is None else args.no_replay or list(STRATEGIES), args.profile,
                            args.replay_hashes))
        result = {"kind": "scale", "what": f"curation at scale ({args.shape} trajectories, {args.sandbox} sandbox"
                  + (f", the {args.profile} profile's ctx.budget)" if args.profile else ")"),
                  "date": today, "command": "bench/scale.py " + " ".join(argv), "commit": label(ROOT),
                  "machine": machine(), "shape": args.shape, "sandbox": args.sandbox, "rows": rows,
                  **({"budget_profile": args.profile} if args.profile else {})}
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")   # after each size: partial results kept
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
