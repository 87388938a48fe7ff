"""The cells of the quality benchmark, each computed once under a cache directory.

A row is a strategy on a corpus (with ablations); a cell is one row trained with one seed and
evaluated on one task subset. Three caches, each keyed by the sha256 of what decides its bytes:

    CACHE/curations/<key>/   the strategy executed in the sandbox (sandbox.curate.execute):
                             strategy files × corpus bytes × curation seed × runtime
    CACHE/trainings/<key>/   the fixed recipe (experiments.train_eval.train_on, as the loop trains):
                             SFT and RL artifacts' hashes × recipe × profile × base × seed; a
                             training whose SFT stage another one here already trained takes
                             that stage over (trainer.sft_reuse), its key unchanged
    CACHE/cells/<key>/       the evaluation (experiments.train_eval.evaluate_on, as the loop evaluates)
                             with cell.json: training key × memory's hash (and the retrieval
                             rule, with memory) × split × task ids × metric

A cell's directory appears whole (written beside it, then renamed), so an interrupted benchmark
continues where it stopped and a cell shared by two rows (an ablation without memory trains
what its row trains) is computed once.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from base.errors import UserError
from trainer import memory as memory_mod
from trainer.recipe import written_as
from base.registry import DEFAULT as DEFAULT_BENCHMARK, OLD_NAMES, current
from base.files import atomic_json, read_json, read_jsonl, sha256_files
from environments.policies.limits import LEGACY_MAX_NEW_TOKENS
from environments.evaluate import EvalResult
from experiments.train_eval import EvalSpec, TrainSpec, evaluate_on, memory_used, train_on, used
from corpora import load_corpus
from sandbox.curate import execute, runtime_sha256
from sandbox.executor import Limits
from experiments.quality import SEEDS, TEST_TASKS
from sandbox.manifest import Manifest

ABLATIONS = ("no-sft", "no-rl", "no-memory")
# A cell's key names its benchmark as it is called now; a cell a cache made before a rename
# (registry.OLD_NAMES: next-call was replay) is keyed by the old name, and is still found under it.
_KEY_NAMES_BEFORE = {new: old for old, new in OLD_NAMES.items()}


@dataclass(frozen=True)
class Setting:
    """What every cell of one benchmark invocation shares: its tasks, seeds and corpus, how each row
    is trained (`train`, the loop's TrainSpec) and how each cell is evaluated (`eval`, the loop's
    EvalSpec; the setting's benchmark, metric, tasks and corpus and the profile's threads are added
    by `Cells.eval_spec`)."""

    benchmark: str = DEFAULT_BENCHMARK
    split: str = "test"
    """"test" for the tables (outside any run's loop); "dev" to measure the loop's noise."""
    tasks: int | None = TEST_TASKS
    """N tasks of the split, balanced over its categories (None: all)."""
    categories: tuple[str, ...] = ()
    """Only these categories of the benchmark (): all of them); the cells' keys name their tasks."""
    seeds: tuple[int, ...] = tuple(range(SEEDS))
    metric: str = "task_success"
    train: TrainSpec = TrainSpec()
    """The profile, the base (None: the profile's) and the budget overrides, part of the training
    key; the rest as the loop's trainings take it by default."""
    eval: EvalSpec = EvalSpec()
    """The batches and the decoding budget: a run's own when `curateevo test --seeds` scores its
    strategies; `max_new_tokens` is part of a cell's key when not 128 (the default until 2026-11-29)."""
    curation_seed: int = 0
    curation_timeout_s: float = Limits.timeout_s
    corpus: tuple[str, ...] = ()
    """A benchmark without an environment (next-call): the user's corpus files, whose held-out tenth
    are the tasks; the rows curate the other nine tenths."""
    tools: str | None = None
    """next-call: the corpus's tool schemas (`--tools`), as the run that curated it loaded them."""
    corpus_sha256: str | None = None
    """next-call: the corpus's hash (part of every cell's key and of the calibration's setting)."""
    user: tuple[str, str, str, int] | None = None
    """The simulated user's endpoint (model, base URL, key variable, max tokens; environments/user_sim.py)
    where the benchmark has user-simulated tasks (τ² airline/retail): its model and URL key the cells."""

    def to_json(self) -> dict:
        """The setting as a table's raw result and a calibration record it, flat as it was before the
        specs were nested (a calibration's key hashes it, `calibration._key`)."""
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("train", "eval")
                and not (f.name == "categories" and not self.categories) and not (f.name == "user" and not self.user)}
        # categories and user are named only when chosen, the budget's fields by their written names
        # (trainer.recipe.WRITTEN_AS): older keys hold
        return {**flat, "profile": self.train.profile, "base": self.train.base, "budget": written_as(self.train.budget),
                "batch_size": self.eval.batch_size, "max_new_tokens": self.eval.max_new_tokens,
                "seeds": list(self.seeds), "corpus": list(self.corpus)}


@dataclass(frozen=True)
class Row:
    """A line of a table: a strategy's files run on a corpus file, with ablations."""

    id: str
    label: str
    files: dict
    corpus: Path
    ablations: tuple[str, ...] = ()
    table: int = 1

    def ablated(self, ablation: str) -> "Row":
        return dataclasses.replace(self, id=f"{self.id} {ablation}", label=f"{self.label} w/o {_WITHOUT[ablation]}",
                                   ablations=tuple(sorted({*self.ablations, ablation})), table=2)


_WITHOUT = {"no-sft": "SFT data", "no-rl": "RL data", "no-memory": "memory at evaluation"}


def _key(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def consumed_sha256(path: Path) -> str:
    """sha256 of an artifact file as training and evaluation read it: each record with its
    `meta.provenance` left out (lineage, base/provenance.py, never reaches the trainer or the
    retriever), so a file without provenance hashes as its bytes do and lineage leaves every
    cached training and cell valid."""
    from base.provenance import KEY
    from base.schemas import canonical_json

    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for line in f:
            row = json.loads(line)
            meta = json.loads(row["meta"]) if isinstance(row.get("meta"), str) else None
            if isinstance(meta, dict) and KEY in meta:
                del meta[KEY]
                line = (canonical_json({**row, "meta": canonical_json(meta)}) + "\n").encode("utf-8")
            sha.update(line)
    return sha.hexdigest()


class Cells:
    """The cache of one benchmark invocation: curations, trainings and evaluated cells."""

    def __init__(self, root: Path, setting: Setting, executor, curated_runtime: str | None = None):
        """`curated_runtime`: the sandbox runtime hash (sandbox.curate.runtime_sha256) of the machine
        that curated this cache's rows: they are reused and nothing is curated here (a training
        machine without the sandbox; `executor` may then be None)."""
        from base.registry import get_benchmark
        from trainer.models import check_name

        self.root, self.setting, self.executor = Path(root), setting, executor
        prof = setting.train.resolved
        self.base = setting.train.base or prof.base
        check_name(self.base)
        self.train_spec = setting.train.model_copy(update={"base": self.base})
        """How every row of this setting is trained: as the loop trains (experiments.train_eval.train_on)."""
        self.eval_spec = setting.eval.model_copy(update={
            "benchmark": setting.benchmark, "metric": setting.metric, "tasks": setting.tasks,
            "threads": self.train_spec.threads, "corpus": tuple(setting.corpus), "corpus_tools": setting.tools})
        """How every cell is evaluated: as the loop evaluates (experiments.train_eval.evaluate_on), on the
        profile's pinned threads, with the setting's decoding budget (the policies' default unless a run's)."""
        from trainer.recipe import curation_budget

        self.curation_budget = curation_budget(prof)   # ctx.budget, as the loop gives its candidates
        self._recipe = self.recipe_of(setting.train.budget)
        self._adopted: dict[str, Path] = {}
        self._adopted_evals: dict[str, Path] = {}   # training key -> a run's evaluation of that training
        bench = get_benchmark(setting.benchmark, **self.benchmark_options())
        self.tasks = bench.tasks(setting.split, limit=setting.tasks, categories=setting.categories or None)
        if not self.tasks:
            raise UserError(f"{setting.benchmark} has no {setting.split} tasks")
        self.category = {t.id: t.category for t in self.tasks}
        self.groups = {t.id: t.meta["task_group"] for t in self.tasks if "task_group" in (t.meta or {})}
        """A scored id → the task it is a record of (next-call's held-out records; base/paired.py)."""
        self.curate_here = curated_runtime is None
        self.runtime = curated_runtime or runtime_sha256()
        self._artifacts: dict[str, Path] = {}
        self._used: dict[tuple[Path, tuple], dict] = {}   # a curation's files as a row uses them, read once
        self._sha: dict[Path, str] = {}                  # an artifact file's consumed hash, read once

    def benchmark_options(self) -> dict:
        """The options that build this setting's benchmark (base.registry.get_benchmark)."""
        if self.setting.corpus:
            return {"corpus": list(self.setting.corpus), "tools": self.setting.tools}
        return {**({"allow_test": True} if self.setting.split == "test" else {}),
                **({"user": self.user} if self.user is not None else {})}

    @property
    def user(self):
        """The simulated user (environments.user_sim.UserEndpoint) where the setting names one and the
        benchmark takes one."""
        from base import registry
        from environments.user_sim import UserEndpoint

        if not self.setting.user or not registry.get(self.setting.benchmark).user_simulated:
            return None
        return UserEndpoint(*self.setting.user)

    def recipe_of(self, budget: dict) -> dict:
        """What decides a training's bytes besides its data and seed: recipe, profile with `budget`, base."""
        from trainer.recipe import RECIPE, get_profile, profile_key

        return {"recipe": dataclasses.asdict(RECIPE),
                "profile": profile_key(dataclasses.asdict(get_profile(self.setting.train.profile).replace(**budget))),
                "base": self.base}

    def adopt(self, run: Path) -> int:
        """Offer a finished run's trainings as this cache's: an epoch's `train-s<seed>` whose
        request names this profile (with this budget), base and seed, whose summary names this
        recipe, and whose SFT and RL files hash as a row's do, is that row's training (the fixed
        recipe is deterministic on its inputs), so the benchmark does not train it again. The
        epoch's evaluation of it (`eval-s<seed>`) is offered too: a cell whose evaluation it is
        (experiments.quality.adopted.same_evaluation) is read from it, not evaluated again.
        Returns how many trainings the run offers."""
        from trainer.recipe import profile_key

        offered = 0
        for request_path in sorted(Path(run).glob("epochs/*/train-s*/request.json")):
            train_dir = request_path.parent
            request, summary = read_json(request_path), train_dir / "summary.json"
            if not (train_dir / "adapter").is_dir() or not summary.is_file():
                continue
            recipe = {"recipe": read_json(summary)["recipe"], "profile": profile_key(request["profile"]),
                      "base": request["base"]}
            if recipe != self._recipe:
                continue
            hashes = {kind: request[kind] and consumed_sha256(Path(request[kind])) for kind in ("sft", "rl")}
            key = _key({**recipe, **hashes, "seed": request["seed"]})
            self._adopted[key] = train_dir
            evaluation = train_dir.parent / f"eval-s{request['seed']}"
            if (evaluation / "metrics.json").is_file() and (evaluation / "trajectories.jsonl").is_file():
                self._adopted_evals[key] = evaluation
            offered += 1
        return offered

    # ------------------------------------------------------------------ curation

    def curation(self, row: Row) -> Path:
        """The row's curated artifacts (manifest.json, sft/rl/memory.jsonl), executed once."""
        if row.id in self._artifacts:
            return self._artifacts[row.id]
        corpus = load_corpus([str(row.corpus)])
        key = _key({"strategy": sha256_files(row.files), "corpus": corpus.sha256, "seed": self.setting.curation_seed,
                    "runtime": self.runtime, "budget": self.curation_budget})
        out = self.root / "curations" / key
        if not Manifest.exists(out) and not self.curate_here:
            raise UserError(f"row {row.id!r} has no curation made under runtime {self.runtime[:12]} in {out.parent}: "
                            f"curate it where the sandbox runs (`curateevo bench quality --report-only` with the same "
                            f"rows, budget and corpora) and copy its curations/{key} here")
        if not Manifest.exists(out):
            shutil.rmtree(out, ignore_errors=True)   # execute() writes whole or nothing; a stale dir is no output
            execute(row.files, corpus, out, seed=self.setting.curation_seed, executor=self.executor,
                    limits=Limits(timeout_s=self.setting.curation_timeout_s), budget=self.curation_budget)
        self._artifacts[row.id] = out
        return out

    # ------------------------------------------------------------------ keys

    def inputs(self, row: Row) -> dict:
        """What the row trains on and retrieves from: artifact paths and hashes (None: not used)."""
        art = self.curation(row)
        if (art, row.ablations) not in self._used:   # a curation's files never change once written
            for path in (files := used(art, row.ablations)).values():
                if path is not None and path not in self._sha:
                    self._sha[path] = consumed_sha256(path)
            self._used[art, row.ablations] = {kind: path and (path, self._sha[path]) for kind, path in files.items()}
        return self._used[art, row.ablations]

    def training_key(self, row: Row, seed: int) -> str | None:
        used = self.inputs(row)
        if used["sft"] is None and used["rl"] is None:
            return None   # nothing to train: the base model is evaluated, as the loop does
        hints = self._recipe["profile"].get("sft_memory_hints") and used["memory"]   # a bank read at training
        return _key({**self._recipe, "sft": used["sft"] and used["sft"][1], "rl": used["rl"] and used["rl"][1],
                     "seed": seed, **({"memory": hints[1], "retrieval": memory_mod.RETRIEVAL} if hints else {})})

    def cell_key(self, row: Row, seed: int) -> str:
        """The key a new cell is written under: its benchmark by the name it has now."""
        return self._cell_key(row, seed, current(self.setting.benchmark))

    def cell_keys(self, row: Row, seed: int) -> tuple[str, ...]:
        """Every key the cell may be cached under: today's, then the one a cache made before its
        benchmark was renamed holds it under (registry.OLD_NAMES)."""
        before = _KEY_NAMES_BEFORE.get(current(self.setting.benchmark))
        return (self.cell_key(row, seed), *([self._cell_key(row, seed, before)] if before else []))

    def _cell_key(self, row: Row, seed: int, benchmark: str) -> str:
        memory = self.inputs(row)["memory"]
        return _key({"training": self.training_key(row, seed), "base": self.base, "memory": memory and memory[1],
                     # the rule hints are retrieved by decides a cell with memory (not one without)
                     **({"retrieval": memory_mod.RETRIEVAL} if memory else {}),
                     "benchmark": benchmark, "split": self.setting.split,
                     "tasks": [t.id for t in self.tasks], "metric": self.setting.metric,
                     "batch_size": self.setting.eval.batch_size, "seed": seed,
                     **({"corpus": self.setting.corpus_sha256} if self.setting.corpus else {}),
                     **({"user": self.user.record()} if self.user is not None else {}),
                     # keyed when not the budget every cell was made with before it was part of the key
                     **({"max_new_tokens": self.setting.eval.max_new_tokens}
                        if self.setting.eval.max_new_tokens != LEGACY_MAX_NEW_TOKENS else {})})

    def cached(self, row: Row, seed: int) -> dict | None:
        """The cell from the cache under any of its keys (`cell_keys`), else None."""
        for key in self.cell_keys(row, seed):
            path = self.root / "cells" / key / "cell.json"
            if path.is_file():
                return read_json(path)
        return None

    # ------------------------------------------------------------------ computing

    def cell(self, row: Row, seed: int, echo: Callable[[str], None] | None = None) -> dict:
        """The row's cell for `seed`: from the cache, else trained and evaluated now."""
        done = self.cached(row, seed)
        if done is not None:
            return done
        adapter = self._trained(row, seed, echo)
        key = self.cell_key(row, seed)
        used = self.inputs(row)
        source = self._run_evaluation(row, seed)

        def evaluate(tmp: Path) -> None:
            s = self.setting
            if source is not None:   # the run evaluated this training as this cell would: read, not redone
                shutil.copytree(source, tmp / "eval")
                atomic_json(tmp / "adopted.json", {"from": str(source)})
                doc = EvalResult(read_json(tmp / "eval" / "metrics.json"))
            else:
                doc = evaluate_on(self.eval_spec, s.split, tmp / "eval", base=self.base, adapter=adapter,
                                  memory=used["memory"] and used["memory"][0], seed=seed,
                                  allow_test=s.split == "test" and not s.corpus, categories=list(s.categories) or None,
                                  user=self.user)
            if doc.tasks != [t.id for t in self.tasks]:
                raise RuntimeError("the evaluation chose other tasks than the cell's key names")
            # call_f1 (next-call): a held-out record's own call F1, as the loop scores it; else success
            outcome = "reward" if s.metric == "call_f1" else "success"
            scores = {t["meta"]["task_id"]: float(t["outcome"][outcome])
                      for t in read_jsonl(tmp / "eval" / "trajectories.jsonl")}
            trained = Path(adapter).parent / "summary.json" if adapter else None
            sft = (read_json(trained).get("sft") or {}) if trained and trained.is_file() else {}
            atomic_json(tmp / "cell.json", {"key": key, "seed": seed, "P": doc.P, "metric": s.metric,
                                            "training": self.training_key(row, seed), "adapter": adapter,
                                            "scores": scores, "category": self.category,
                                            "call_rate": doc.metrics.get("call_rate"),
                                            "format_error_rate": doc.metrics.get("format_error_rate"),
                                            "sft_loss_last": sft.get("loss_last"),
                                            "eval_wall_s": doc.timing.get("episodes_s")})

        return read_json(_whole(self.root / "cells" / key, evaluate) / "cell.json")

    def _bank(self, row: Row) -> str | None:
        """The memory file the row's evaluation retrieves from (None: no bank, or one without records)."""
        memory = self.inputs(row)["memory"]
        return memory_used(memory[0]) if memory else None

    def _run_evaluation(self, row: Row, seed: int) -> Path | None:
        """A run's evaluation of this cell's adopted training that is this cell's evaluation: the
        same tasks, split, metric, memory bank, decoding and benchmark version; None otherwise."""
        source = self._adopted_evals.get(self.training_key(row, seed) or "")
        if source is None or self.setting.corpus:
            return None
        from experiments.quality.adopted import expected_evaluation, same_evaluation

        memory = self._bank(row)
        expected = expected_evaluation(self.eval_spec, self.setting.split, [t.id for t in self.tasks], self.base,
                                       seed, memory, self.benchmark_options())
        return source if same_evaluation(read_json(source / "metrics.json"), expected) is None else None

    def gold(self, row: Row, seed: int) -> dict | None:
        """The cell's gold-call log-likelihood on its tasks (environments/gold_likelihood.py), read on
        the prompts its evaluation showed the policy (with the row's memory hints), cached beside
        cell.json; None while the cell is not computed."""
        cell = self.cached(row, seed)
        if cell is None:
            return None
        memory = self._bank(row)
        # gold-memory.json: read with the hints (gold.json of a cell with a bank, written before
        # 2026-11-29 evening, was read without them and is not used)
        path = self.root / "cells" / cell["key"] / ("gold-memory.json" if memory else "gold.json")
        if not path.is_file():
            from environments import runner
            from base.registry import get_benchmark
            from environments.evaluate import build_policy
            from environments.gold_likelihood import gold_log_likelihood

            bench = get_benchmark(self.setting.benchmark, **self.benchmark_options())
            policy = build_policy(base=self.base, adapter=cell["adapter"], batch_size=self.eval_spec.batch_size,
                                  threads=self.eval_spec.threads)
            index = memory_mod.MemoryIndex.from_file(memory, self.eval_spec.memory_k) if memory else None
            items = runner.hinted(runner.step_items(bench, self.tasks), index)
            atomic_json(path, gold_log_likelihood(policy.model, policy.tokenizer, items, self.category, policy.style))
        return read_json(path)

    def _trained(self, row: Row, seed: int, echo) -> str | None:
        key = self.training_key(row, seed)
        if key is None:
            return None
        out = self.root / "trainings" / key
        if not (out / "adapter").is_dir() and key in self._adopted:
            source = self._adopted[key]
            _whole(out, lambda tmp: (shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("tensorboard")),
                                     atomic_json(tmp / "adopted.json", {"from": str(source)})))
        if not (out / "adapter").is_dir():
            files = {kind: paths and paths[0] for kind, paths in self.inputs(row).items()}

            # the cache's finished trainings may hold this one's SFT stage (a sweep of GRPO budgets
            # trains it once: trainer.sft_reuse); an execution shortcut, no part of any key
            done = sorted(p for p in out.parent.glob("*") if not p.name.startswith("."))
            _whole(out, lambda tmp: train_on(self.train_spec, files, tmp, seed, reuse_sft=done))
        return str(out / "adapter")


def _whole(out: Path, make: Callable[[Path], None]) -> Path:
    """`make` writes into a fresh sibling of `out`, which is then renamed into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        make(tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
