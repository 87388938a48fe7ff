"""What a stage backend runs and shows: a job (`StageJob`), what the run's jobs need of a machine
(`Needs`), and the in-flight stages on the console and in `RUN/stages.json` (`InFlight`)."""
from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from base.files import atomic_json


@dataclass(frozen=True)
class StageJob:
    """One training or evaluation: `call(**kwargs, out=out)` of an importable function. Its result
    is a stage result's journal form (evolver/results.py: `Training.journal()`, `Evaluation.journal()`),
    plain JSON so that a cluster carries it and `EpochJobs.land` records it as it is; the reader
    types it again with the stage class's `from_journal`."""

    key: str
    """Unique within a batch: `train-s0`, `evaluate-s1`, `proxy-2-train`."""
    call: str
    """`module:function`, importable wherever the job runs (the project is installed on every node)."""
    kwargs: Mapping[str, Any]
    """Plain, picklable values; the paths among them are named in `ship`."""
    out: Path
    """The one directory the job writes (on the driver's disk once its result is returned)."""
    ship: tuple[str, ...] = ()
    """Names of kwargs holding driver paths (files or directories) the job reads."""
    after: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """kwarg → (key of an earlier job of the batch, field of its result): a path inside that job's
    output, or None (e.g. an evaluation's adapter, which its training makes)."""
    cpus: int = 1
    gpus: float = 0
    label: str = ""
    """What the console calls it: `epoch 1 train-s0`."""

    def run_here(self, out: Path, **overrides) -> Any:
        """The job in this process, writing `out`."""
        module, name = self.call.split(":")
        return getattr(importlib.import_module(module), name)(**{**self.kwargs, **overrides}, out=out)


@dataclass(frozen=True)
class Needs:
    """What one training and one evaluation of the run ask of a machine."""

    train_cpus: int
    train_gpus: float
    eval_cpus: int
    eval_gpus: float
    profile: str


def needs_of(cfg, gpus_available: bool) -> Needs:
    """A run's needs: a profile that trains on a GPU (device cuda, or auto where there are GPUs)
    takes the launcher's processes in GPUs per training and one GPU per evaluation; every stage
    takes the profile's pinned threads in CPUs (one when it pins none)."""
    from trainer.launch import launcher_processes
    from trainer.recipe import get_profile

    profile = get_profile(cfg.train.profile)
    on_gpu = profile.device == "cuda" or (profile.device == "auto" and gpus_available)
    cpus = profile.threads or 1
    return Needs(train_cpus=cpus, train_gpus=launcher_processes(cfg.train.launcher) if on_gpu else 0, eval_cpus=cpus,
                 eval_gpus=1 if on_gpu else 0, profile=profile.name)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class InFlight:
    """The stages a backend is running now: one console line when they change (each with its node,
    elapsed time and ETA), and `RUN/stages.json`, which `curateevo status` shows."""

    REPEAT_S = 60.0   # an unchanged set of stages is shown again (with its times) this often

    def __init__(self, path: Path):
        self.path, self.shown, self.shown_at, self.durations = path, None, 0.0, {}

    def update(self, rows: list[dict]) -> None:
        """Record `rows` (each: stage, label, state, node, elapsed_s, eta_s) and show them when a stage
        started, ended or moved, or every REPEAT_S seconds."""
        atomic_json(self.path, {"time": time.time(), "stages": rows})
        key = [(r["stage"], r["state"], r.get("node")) for r in rows]
        if rows and (key != self.shown or time.monotonic() - self.shown_at >= self.REPEAT_S):
            say("in flight: " + " · ".join(self.describe(r) for r in rows))
            self.shown, self.shown_at = key, time.monotonic()

    def finished(self, kind: str, seconds: float) -> None:
        self.durations.setdefault(kind, []).append(seconds)

    def eta(self, kind: str, elapsed: float) -> float | None:
        """Seconds left for a running stage of `kind`, at the mean pace of those that finished."""
        done = self.durations.get(kind)
        return None if not done else max(0.0, sum(done) / len(done) - elapsed)

    @staticmethod
    def describe(row: dict) -> str:
        if row["state"] != "running":
            return f"{row['label']} {row['state']}"
        eta = "" if row.get("eta_s") is None else f", ETA {row['eta_s']:.0f} s"
        return f"{row['label']} on {row['node']} ({row['elapsed_s']:.0f} s{eta})"

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def read_in_flight(root: Path) -> list[dict]:
    """The stages `RUN/stages.json` says are in flight (empty when none is recorded)."""
    from base.files import read_json

    try:
        return list(read_json(Path(root) / "stages.json")["stages"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
