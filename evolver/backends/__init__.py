"""Stage backends: where an epoch's trainings and evaluations run.

The loop hands a backend every pending job of an epoch at once (`submit`) and then asks for the
results one by one in a fixed order (`Batch.result`), journaling each as it gets it: completion
order never reaches the journal, the decisions or any file. A job writes only its own output
directory (`StageJob.out`); when `result(key)` returns, that directory is in place on the
driver's disk, whichever machine computed it.

    local   every job in this process's machine, one after another, when its result is asked for
            (today's behaviour; nothing to install)
    ray     every job submitted at once as a Ray task with its resource needs; inputs and outputs
            travel through Ray's object store or a `--storage` URI (no shared disk)

A new backend is one module in this package plus one line in BACKENDS.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol

from evolver.backends.jobs import InFlight, Needs, StageJob, needs_of, read_in_flight  # noqa: F401  (the package's API)


class Batch(Protocol):
    def result(self, key: str) -> Any:
        """The job's result, its output directory in place; raises what the job raised."""


class StageBackend(Protocol):
    name: str

    def prepare(self, cfg) -> "Needs":
        """What one training and one evaluation of the run `cfg` ask for here; UserError (one
        sentence) when they could never run here. Called before any work."""

    def submit(self, jobs: list[StageJob], landed: Callable[[StageJob, Any], None] | None = None) -> Batch:
        """Start `jobs` (in dependency order: a job's `after` names earlier ones). `landed(job,
        result)` is called as each job's output is in place, in completion order."""

    def close(self) -> None: ...


def _local(cfg, progress: InFlight) -> StageBackend:
    from evolver.backends.local import LocalBackend

    return LocalBackend()


def _ray(cfg, progress: InFlight) -> StageBackend:
    from evolver.backends.ray_cluster import RayBackend

    return RayBackend(cfg.ray_address or None, progress, cfg.storage)


# name → factory(run config, where in-flight stages are shown)
BACKENDS: dict[str, Callable] = {"local": _local, "ray": _ray}


def make_backend(cfg, root: Path) -> StageBackend:
    """The run's backend; its in-flight stages go to `root/stages.json` and the console."""
    return BACKENDS[cfg.backend](cfg, InFlight(Path(root) / "stages.json"))
