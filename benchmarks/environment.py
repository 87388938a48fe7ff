"""The seam between the project and an environment: what an environment implements.

An environment is everything the project knows about one benchmark domain (BFCL single-turn,
BFCL multi-turn, the next-call benchmark, …): its tasks and splits, its episodes and
their official scoring, the scenarios `ctx.env` rebuilds in the sandbox, the leakage index the
host checks artifacts against, the RL reward that re-executes a scenario, and the failure
families and task categories the diagnosis and the offline proposer read. The rest of the
project reaches that knowledge only through this interface and `benchmarks.registry`; nothing
outside an environment's folder imports its private names. (GEPA's adapter is the model: one
small interface, the domain behind it.)

An environment is a class with these attributes and methods; everything heavy (the benchmark's
data, an evaluation package) is imported inside the methods, so importing the module that
defines it stays cheap. Optional capabilities answer "none" rather than raise:

    name            str: the registry name (`--benchmark NAME`), e.g. "bfcl"
    env_tag         str | None: `meta.env.benchmark` of its tasks and of the corpus records whose
                    scenario it can rebuild ("bfcl_multi_turn"); None for an environment without one
    executable      bool: its tasks run as episodes an agent acts in; False when the dev set is the
                    corpus's own held-out tenth, scored step by step (the next-call benchmark)
    metrics         tuple[str, ...]: the P metrics it scores, the default first
    single_step     bool: every task is one step (single-turn), so the step-level pass would score
                    the episodes' answers again: evaluation skips it unless P is step_accuracy
    export_group    str | None: environments that share one scenario folder (BFCL's two share the
                    sandbox's ctx.env runtime) name the same group; None: no ctx.env scenarios
    corpus_settings tuple[str, ...]: the settings of the raw corpus it builds from its train split
                    ("labeled", "wild"); () when it builds none

    benchmark(**options) -> benchmarks.base.Benchmark
        tasks per split, episodes, official scoring, step items (`benchmarks/base.py`).
    build_corpus(out, setting, seed, *, categories, limit, progress, max_records) -> info dict
        write a raw corpus of its train split into `out` (`curateevo corpus build NAME`); the info
        holds "records", "tasks", "success", "bytes", "seconds", "by_variant" and "file" (its name).
    default_corpus(root, setting, seed, max_records) -> Path
        the corpus file of that build, made once under `root` (a run without --corpus).
    export_scenarios(named: {env_tag: {task_id}}) -> (files {relative path: bytes}, summary dict)
        the ctx.env scenario folder for the train-split tasks that corpus records name, over every
        env_tag of its export_group; no dev or test task may appear in it (sandbox/simenv/export.py).
    leakage_rows() -> iterable of GoldRow; leakage_key() -> bytes
        the requests and gold calls of its tasks, every split (the host keeps those of dev and
        test minus what train shares, sandbox/leakage.py); the key changes whenever the rows may.
    rebuilds(env: meta.env) -> bool
        whether the `state_match` RL reward rebuilds this record's scenario (else it falls back to
        `tool_call_match`); False for an environment without one.
    reward_episode(env: meta.env, functions: [str] | None) -> RewardEpisode
        the record's scenario rebuilt with fresh state (`rebuilds(env)` holds), offering
        `functions` (all when None), for the `state_match` reward (trainer/rewards.py).
    reward_error(env: meta.env) -> str | None
        why `reward_episode` would fail on this meta.env, one sentence (checked on the host as the
        artifacts are, sandbox/checker.py); None when it would not or `rebuilds(env)` is False.
    family_prefix   str | None: an error type "<prefix><family>" names a failure family directly (the
                    next-call judge's "next-call:"); None when the checker's error types need `checker_rules`
    checker_rules() -> ((error-type regex, family), ...)
        how its official checker's error types map to the diagnosis's failure families; a family
        "a|b" lets the diagnosis choose by the trajectory's shape (evolver/diagnose.py).
    category_of(task_id: str) -> str
        the category of one of its tasks, as corpus records name it in `meta.env.variant`.
    train_view(corpus: corpora.Corpus, split: spec | None) -> Corpus
        the part of a raw corpus a strategy may see: all of it when the dev tasks are the
        environment's own, else the corpus less its held-out dev and test parts under the run's
        split spec (`corpora.train_part`).
    dev_corpus(paths: [str]) -> [str] | None
        the corpus files its dev set is drawn from (its `benchmark(corpus=...)`); None when it brings
        its own dev tasks.
    holds_out_corpus() -> bool
        whether its dev and test sets are held-out parts of the run's corpus (a run must then give
        --corpus, and no dev spread is measured for it); False when it brings its own tasks.
    task_score(trajectory) -> float
        one evaluated dev task's score, as the paired acceptance rule compares them: the checker's
        success of an episode, or a held-out record's call F1 (its reward) on next-call.

`Episodes` holds the last four, and `executable`, for an environment whose tasks run as episodes.

Adding one: a folder under benchmarks/ with a class implementing the above, and one line in
`benchmarks/registry.py`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Protocol, Sequence, runtime_checkable

from benchmarks.base import Benchmark


class GoldRow(NamedTuple):
    """One task as the leakage guard sees it: its split, id, user request texts and gold calls
    (each a `call_key(name, arguments)` string, in order). `multi`: the calls are a sequence to
    find as a contiguous run (multi-turn); else one assistant message's set of calls."""

    split: str
    task_id: str
    texts: list
    calls: tuple
    multi: bool


@runtime_checkable
class RewardEpisode(Protocol):
    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Execute one call (literal arguments); its observation; never raises."""

    def state(self) -> Any:
        """The scenario's state now, comparable with ==."""


@runtime_checkable
class Environment(Protocol):
    name: str
    env_tag: str | None
    executable: bool
    metrics: tuple
    single_step: bool
    export_group: str | None
    corpus_settings: tuple
    family_prefix: str | None

    def benchmark(self, **options: Any) -> Benchmark: ...

    def build_corpus(self, out: Path, setting: str, seed: int, **options: Any) -> dict: ...

    def default_corpus(self, root: Path, setting: str, seed: int, max_records: int | None) -> Path: ...

    def export_scenarios(self, named: Mapping[str, set]) -> tuple[dict, dict]: ...

    def leakage_rows(self) -> Iterable[GoldRow]: ...

    def leakage_key(self) -> bytes: ...

    def rebuilds(self, env: Mapping) -> bool: ...

    def reward_episode(self, env: Mapping, functions: list | None) -> RewardEpisode: ...

    def reward_error(self, env: Mapping) -> str | None: ...

    def checker_rules(self) -> tuple: ...

    def category_of(self, task_id: str) -> str: ...

    def train_view(self, corpus: Any, split: Mapping | None = None) -> Any: ...

    def dev_corpus(self, paths: Sequence[str]) -> list[str] | None: ...

    def holds_out_corpus(self) -> bool: ...

    def task_score(self, trajectory: Mapping) -> float: ...


class Episodes:
    """What an environment whose tasks run as episodes answers: its dev tasks are its own (no part
    of a corpus is held out, none is read to evaluate), and a task scores its checker's success."""

    executable = True

    def train_view(self, corpus: Any, split: Mapping | None = None) -> Any:
        return corpus

    def dev_corpus(self, paths: Sequence[str]) -> list[str] | None:
        return None

    def holds_out_corpus(self) -> bool:
        return False

    def task_score(self, trajectory: Mapping) -> float:
        return float(trajectory["outcome"]["success"])
