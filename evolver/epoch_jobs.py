"""An epoch's trainings and evaluations as stage backend jobs (evolver/backends/), and the record
of each one whose output landed, so a driver killed before journaling it does not run it again."""
from __future__ import annotations

from pathlib import Path

from base.files import atomic_json, read_json, sha256_path
from evolver.backends import Needs, StageJob
from evolver.config import RunConfig
from evolver.store import RunStore


class EpochJobs:
    def __init__(self, store: RunStore, cfg: RunConfig, needs: Needs):
        self.store, self.cfg, self.needs = store, cfg, needs

    def pending(self, epoch: int, samples: bool) -> tuple[list[StageJob], dict]:
        """The epoch's jobs not yet done (per seed: train, evaluate, and the boundary rollouts when
        `samples`), and the results of those a killed driver's cluster finished after the journal's
        last entry (their outputs in place, their inputs unchanged)."""
        folder, jobs, adopted = self.store.epoch_dir(epoch), [], {}

        def add(job: StageJob):
            done = self.store.done(epoch, job.key)
            result = done.result if done else self.adopt(epoch, job)
            if result is None:
                jobs.append(job)
            else:
                adopted[job.key] = result
            return result

        # the run's earlier trainings (every seed): one may hold a training's SFT stage (trainer.sft_reuse)
        earlier = [str(p) for p in sorted(self.store.root.glob("epochs/*/train-s*"))
                   if p.parent.name.isdigit() and int(p.parent.name) < epoch]
        for seed in self.cfg.seeds:
            common = {"cfg": self.cfg, "artifacts": folder / "artifacts", "seed": seed}
            trained = add(self.job(f"train-s{seed}", folder / f"train-s{seed}", epoch, **common, reuse_sft=earlier))
            link = {"after": {"adapter": (f"train-s{seed}", "adapter")}} if trained is None else \
                {"adapter": trained["adapter"]}
            add(self.job(f"evaluate-s{seed}", folder / f"eval-s{seed}", epoch, **common, **link))
            if samples:
                add(self.job(f"sample-s{seed}", folder / f"sample-s{seed}", epoch, **common, **link,
                             samples=self.cfg.boundary_samples))
        return jobs, adopted

    def job(self, key: str, out: Path, epoch: int | None, after: dict | None = None, **kwargs) -> StageJob:
        """`train_epoch` (a key with "train") or `evaluate_epoch` (sampled rollouts too) as a backend job."""
        train = "train" in key
        return StageJob(key, f"evolver.stages:{'train' if train else 'evaluate'}_epoch", kwargs, out,
                        ship=("artifacts", "adapter"), after=after or {},
                        cpus=self.needs.train_cpus if train else self.needs.eval_cpus,
                        gpus=self.needs.train_gpus if train else self.needs.eval_gpus,
                        label=key if epoch is None else f"epoch {epoch} {key}")

    def land(self, epoch: int, job: StageJob, result) -> None:
        """A job's output is in place (any order): recorded beside the journal with the hashes of
        its output and inputs (`adopt` takes it only while they are unchanged)."""
        inputs = self._input_hashes(job)
        for name, (dep, field_) in job.after.items():   # a dependency lands before its dependants
            value = read_json(self._path(epoch, dep))["result"].get(field_)
            if value is not None:
                inputs[name] = sha256_path(value)
        atomic_json(self._path(epoch, job.key), {"result": result, "inputs": inputs,
                                                 "out": sha256_path(job.out) if job.out.exists() else None})

    def adopt(self, epoch: int, job: StageJob):
        """The result `land` recorded for `job`, or None when there is none or anything changed."""
        path = self._path(epoch, job.key)
        if not path.is_file():
            return None
        record = read_json(path)
        out = sha256_path(job.out) if job.out.exists() else None
        return record["result"] if (record["out"], record["inputs"]) == (out, self._input_hashes(job)) else None

    def _path(self, epoch: int, key: str) -> Path:
        return self.store.epoch_dir(epoch) / ".landed" / f"{key}.json"

    @staticmethod
    def _input_hashes(job: StageJob) -> dict:
        return {name: sha256_path(job.kwargs[name]) for name in job.ship if job.kwargs.get(name) is not None}
