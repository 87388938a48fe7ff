"""The local backend: each job runs in this process when its result is asked for, in the order
asked (the loop's fixed order), exactly as the loop ran its stages before there were backends."""
from __future__ import annotations

import shutil
from typing import Any

from evolver.backends.jobs import Needs, StageJob, needs_of


class LocalBatch:
    def __init__(self, jobs: list[StageJob]):
        self.jobs, self.results = {j.key: j for j in jobs}, {}

    def result(self, key: str) -> Any:
        if key not in self.results:
            job = self.jobs[key]
            deps = {name: self.result(dep).get(field_) for name, (dep, field_) in job.after.items()}
            shutil.rmtree(job.out, ignore_errors=True)   # a job runs only when it is not done: start clean
            job.out.parent.mkdir(parents=True, exist_ok=True)
            self.results[key] = job.run_here(job.out, **deps)
        return self.results[key]


class LocalBackend:
    name = "local"

    def prepare(self, cfg) -> Needs:
        # nothing to check: trainer.devices refuses a profile that demands a missing GPU, in one sentence
        return needs_of(cfg, gpus_available=False)

    def submit(self, jobs: list[StageJob], landed=None) -> LocalBatch:
        return LocalBatch(jobs)

    def close(self) -> None:
        pass
