"""What every stage of a run shares: its config, store and workspace, the services made when first
used (corpus, sandbox executor, proposer, LLM, training backend), the LLM budget metering, the
progress line with its ETA, and what the journal says of earlier epochs (decisions, the best)."""
from __future__ import annotations

import functools
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

from base.files import read_jsonl
from base import registry
from evolver.acceptance import make_rule
from evolver.backends import make_backend
from evolver.config import RunConfig, llm_moved
from evolver.epoch_jobs import EpochJobs
from evolver.integrity import check_artifacts, check_workspace
from evolver.llm import USAGE_KEYS
from evolver.proposers import make_proposer
from evolver.results import Decision, StageResult, result_type
from evolver.stages import channel_answer
from evolver.own_strategy import create_workspace
from evolver.store import RunStore
from experiments import journal
from corpora import load_corpus
from sandbox.executor import make_executor
from workspace.repository import Workspace


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class RunContext:
    """One run's shared state. `stage` runs one stage of one epoch through `RunStore.stage` (so
    `resume` skips it when done and intact) and returns its typed result."""

    def __init__(self, store: RunStore, backend=None):
        self.store = store
        if backend is not None:
            self.backend = backend
        self.cfg = llm_moved(RunConfig.from_json(store.config, where=str(store.root / "run.json")),
                             store.journal.events())   # where `resume --base-url` moved its LLM
        if not (store.root / "strategy").exists():   # created here, so a kill right after run.json is harmless
            create_workspace(store.root / "strategy", self.cfg)
        self.ws = Workspace.open(store.root / "strategy")
        check_workspace(store, self.ws)
        check_artifacts(store)
        self.rule = make_rule(self.cfg)
        self.env = registry.get(self.cfg.benchmark)
        self._t0, self._ran, self._timed = None, set(), []

    # what only some stages need is made when first used (a retrain needs no sandbox, no agent)
    @functools.cached_property
    def corpus(self):
        """What the strategy sees: the raw corpus as its environment lets a strategy see it (less the
        held-out dev and test parts when they are the corpus's own: those records never reach the sandbox)."""
        return self.env.train_view(load_corpus(list(self.cfg.corpus), on_error=self.cfg.on_error,
                                               tools=self.cfg.tools or None, on_progress=say),
                                   self.cfg.effective_holdout)

    @functools.cached_property
    def executor(self):
        return make_executor(self.cfg.sandbox, warn=say)

    @functools.cached_property
    def proposer(self):
        return make_proposer(self.cfg.proposer, self.cfg, self.llm, self.executor)

    @functools.cached_property
    def llm(self):
        """The run's LLM (None without one), its budgets reduced by what earlier stages spent."""
        if self.cfg.llm is None:
            return None
        from evolver.llm import LLM

        config, spent = self.cfg.llm, llm_spent(self.store)
        if config.budget_tokens is not None:   # a copy, not checked again: a spent budget is 0
            config = config.model_copy(update={"budget_tokens": max(0, config.budget_tokens - spent["tokens"])})
        if config.budget_usd is not None:
            config = config.model_copy(update={"budget_usd": max(0.0, config.budget_usd - spent["usd"])})
        return LLM(config, self.store.root / "llm")

    @functools.cached_property
    def curation_llm(self):
        """What answers a strategy's ctx.llm: the run's LLM layer (None without one)."""
        return None if self.llm is None else channel_answer(self.llm)

    @functools.cached_property
    def backend(self):
        """Where trainings and evaluations run (evolver/backends/): this machine, or a Ray cluster."""
        return make_backend(self.cfg, self.store.root)

    @functools.cached_property
    def needs(self):
        return self.backend.prepare(self.cfg)

    @functools.cached_property
    def jobs(self) -> EpochJobs:
        return EpochJobs(self.store, self.cfg, self.needs)

    # ------------------------------------------------------------------ running a stage

    def stage(self, epoch: int, name: str, run: Callable[[], StageResult], outputs=()) -> StageResult:
        """Stage `name` of `epoch`: its journaled result when done and intact, else `run()` now,
        journaled (with the LLM usage it caused) and shown with the run's progress."""
        kind = result_type(name)
        done = self.store.done(epoch, name)
        if done is not None:
            return kind.from_journal(done.result)
        t0 = time.monotonic()
        self._t0 = self._t0 or t0
        self._ran.add(epoch)
        say(f"{self.progress(epoch)} · {name} …")
        metered = self._metered(run) if self.llm is not None else lambda: run().journal()
        journaled = self.store.stage(epoch, name, metered,
                                     (lambda data: outputs(kind.from_journal(data))) if callable(outputs) else outputs)
        say(f"{self.progress(epoch)} · {name} done in {time.monotonic() - t0:.1f} s")
        return kind.from_journal(journaled)

    def result(self, epoch: int, name: str) -> StageResult | None:
        """The journaled result of a done stage, else None."""
        done = self.store.done(epoch, name)
        return None if done is None else result_type(name).from_journal(done.result or {})

    def _metered(self, run):
        """`run`'s journal form with the LLM usage it caused (tokens, USD, calls, time)."""
        def metered() -> dict:
            before = self.llm.usage()
            result = run()
            after = self.llm.usage()
            delta = {k: after[k] - before[k] for k in USAGE_KEYS}
            if delta["calls"]:
                result.llm = {**delta, "usd": round(delta["usd"], 6), "wall_s": round(delta["wall_s"], 3),
                              **({"unpriced": True} if after["unpriced"] else {})}
            return result.journal()
        return metered

    def progress(self, epoch: int) -> str:
        """`epoch 1 (2/3, ETA 25 min)`: where the run is, and when it should end at the pace of
        the epochs this process ran (a resumed run's skipped stages do not count)."""
        if epoch < 0:
            return "run"
        eta = ""
        if self._timed:   # the pace of the finished epochs; what the current one has spent is not left
            last_done, done_at = self._timed[-1]
            per_epoch = (done_at - self._t0) / len(self._timed)
            left = per_epoch * max(0, self.cfg.epochs - 1 - last_done) - (time.monotonic() - done_at)
            eta = f", ETA {max(0.0, left) / 60:.0f} min"
        return f"epoch {epoch} ({epoch + 1}/{self.cfg.epochs}{eta})"

    def finished(self, epoch: int) -> None:
        """Epoch `epoch` is done (decided, diagnosed, proposed on): if it ran here, it times the ETA."""
        if epoch in self._ran:
            self._timed.append((epoch, time.monotonic()))

    def fresh_dir(self, epoch: int, name: str) -> Path:
        """`epochs/<e>/<name>`, emptied: a stage runs again only when it is not done, so it starts clean."""
        path = self.store.epoch_dir(epoch) / name
        shutil.rmtree(path, ignore_errors=True)
        return path

    # ------------------------------------------------------------------ what earlier epochs left

    def decisions(self) -> list[Decision]:
        return [Decision.from_journal(d) for d in journal.results(self.store.journal.events(), "decide")]

    def best(self) -> Decision | None:
        accepted = [d for d in self.decisions() if d.accepted]
        return accepted[-1] if accepted else None

    def evaluated(self, epoch: int, kind: str = "eval") -> list[dict]:
        """The trajectories of an epoch's evaluations (`sample`: its boundary rollouts), all seeds."""
        paths = [self.store.epoch_dir(epoch) / f"{kind}-s{s}" / "trajectories.jsonl" for s in self.cfg.seeds]
        return [t for p in paths if p.is_file() for t in read_jsonl(p)]

    def per_task(self, epoch: int) -> dict[str, list[float]]:
        """Dev task id → its score in each seed's evaluation (the environment's task score)."""
        scores: dict[str, list[float]] = {}
        for s in self.cfg.seeds:
            for t in read_jsonl(self.store.epoch_dir(epoch) / f"eval-s{s}" / "trajectories.jsonl"):
                scores.setdefault(t["meta"]["task_id"], []).append(self.env.task_score(t))
        return scores

    def task_groups(self, epoch: int) -> dict[str, str]:
        """Dev id → the task it is a record of, where the evaluation named one (the next-call
        benchmark's held-out records of published tasks); an id not named is a task of its own."""
        return {t["meta"]["task_id"]: t["meta"]["task_group"] for t in self.evaluated(epoch) if "task_group" in t["meta"]}


def llm_spent(store: RunStore) -> dict:
    """Tokens and USD the run's finished stages spent on LLM calls (for budgets across resume)."""
    tokens, usd = 0, 0.0
    for event in journal.done(store.journal.events()):
        usage = event.llm
        if usage:
            tokens += usage["prompt_tokens"] + usage["completion_tokens"]
            usd += usage["usd"]
    return {"tokens": tokens, "usd": usd}
