"""The seam between the project and an environment: two things required, the rest declared.

An environment is what the project knows about one benchmark domain (BFCL single-turn, BFCL
multi-turn, ACEBench, τ²-bench, the next-call benchmark, …). GEPA's adapter is the model: a
benchmark needs only what it uses. **Required** — two members:

    name              str: the registry name (`--benchmark NAME`), e.g. "acebench"
    benchmark(**o)    -> base.benchmark.Benchmark: its tasks per split (each with its category),
                      an episode per task, and the official scoring of an episode (`tasks`,
                      `episode`, `score`; `step_items` / `judge_step` only where it scores steps)

**Optional capabilities** (`CAPABILITIES`) — an environment declares one by defining its members;
one it does not declare answers with the default below (`Declared`), and a run that needs a
capability the environment lacks is refused up front in one sentence (`require`):

    corpus       corpus_settings (tuple), build_corpus(out, setting, seed, **o) -> info,
                 default_corpus(root, setting, seed, max_records) -> Path
                 a raw corpus of its train split (`curateevo corpus build NAME`, a run without --corpus)
    scenarios    env_tag (str: `meta.env.benchmark` of its tasks and of the records it rebuilds),
                 export_group (str), export_scenarios(named {env_tag: {task_id}}) -> (files, summary)
                 the ctx.env scenario folder of the train-split tasks records name (sandbox/simenv)
    reward       rebuilds(env) -> bool, reward_episode(env, functions) -> RewardEpisode,
                 reward_error(env) -> str | None: the `state_match` RL reward (trainer/rewards.py)
    leakage      leakage_rows() -> [GoldRow], leakage_key() -> bytes: its dev/test requests and gold
                 calls, which the host keeps out of every artifact (sandbox/leakage.py)
    held_out     train_view(corpus, holdout) -> corpus, dev_corpus(paths) -> [str] | None,
                 holds_out_corpus() -> bool, executable = False: its dev and test sets are held-out
                 parts of the run's corpus (the next-call benchmark), not tasks of its own
    diagnosis    checker_rules() -> ((regex, family), ...), family_prefix (str | None): how its
                 checker's error types map to the diagnosis's failure families (evolver/diagnose.py)

and plain attributes with defaults: `metrics` (the P metrics it scores, default first; default
("task_success",)), `single_step` (every task is one step; default False), `prompt_tokens` (the prompt
cap its tasks need; default 0: the evaluation's own), `declining` (its categories whose right answer is
no call; default none), `user_simulated` (its `benchmark()` takes `user`, the endpoint of an LLM playing
the user, environments/user_sim.py; default False), `category_of(task_id)`
(default: the id less a trailing number), `task_score(trajectory)` (default: the checker's success).

Everything heavy (the benchmark's data, an evaluation package) is imported inside the methods, so
importing the module that defines an environment stays cheap. Adding one: a class with `name` and
`benchmark`, and one line in `base/registry.py` (or a `curateevo.environments` entry point).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, NamedTuple, Protocol, runtime_checkable

from base.errors import UserError
from base.benchmark import Benchmark


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
    """What an environment must define: the rest is declared (`CAPABILITIES`)."""

    name: str

    def benchmark(self, **options: Any) -> Benchmark: ...


CAPABILITIES: dict[str, tuple[tuple[str, ...], str]] = {
    "corpus": (("corpus_settings", "build_corpus", "default_corpus"), "builds a raw corpus of its train split"),
    "scenarios": (("env_tag", "export_group", "export_scenarios"), "rebuilds train-split scenarios for ctx.env"),
    "reward": (("rebuilds", "reward_episode", "reward_error"), "rebuilds a scenario for the state_match RL reward"),
    "leakage": (("leakage_rows", "leakage_key"), "lists its dev and test gold answers for the leakage guard"),
    "held_out": (("train_view", "dev_corpus", "holds_out_corpus"), "holds out parts of the run's corpus as its dev and test sets"),
    "diagnosis": (("checker_rules",), "maps its checker's error types to failure families"),
}
"""capability → (the members that declare it, what it gives), as `require` says it."""


class Declared:
    """An environment as the project calls it: the environment's own members where it defines them,
    the defaults below where it does not (a capability it lacks answers "none"). The registry
    hands out environments wrapped so; `declares(capability)` says what the environment itself has."""

    env_tag: str | None = None
    executable = True
    metrics: tuple = ("task_success",)
    single_step = False
    export_group: str | None = None
    corpus_settings: tuple = ()
    family_prefix: str | None = None
    prompt_tokens = 0
    """The prompt cap its tasks need (0: the evaluation's default suffices); `evaluate_on` raises the cap to it."""
    user_simulated = False
    """Its benchmark takes `user=` (environments.user_sim.UserEndpoint): some tasks need an LLM playing the user."""
    declining: tuple = ()
    """Its categories whose right answer is no call (a decline, or a text naming the request's flaw): the
    quality tables pair them apart, so a gain made by declining more is not read as a better agent."""

    def __init__(self, env: Any):
        missing = [m for m in ("name", "benchmark") if not hasattr(env, m)]
        if missing:
            raise TypeError(f"{type(env).__name__} is no environment: it lacks {' and '.join(missing)} "
                            "(base/environment.py)")
        self.plugged = env
        self.name = env.name
        for attr in dir(env):
            if not attr.startswith("_") and attr not in ("plugged", "declares"):
                object.__setattr__(self, attr, getattr(env, attr))

    def declares(self, capability: str) -> bool:
        members, _ = CAPABILITIES[capability]
        return all(hasattr(self.plugged, m) for m in members)

    def __repr__(self) -> str:
        return f"<environment {self.name} ({type(self.plugged).__name__})>"

    # the defaults of what the environment does not declare
    def build_corpus(self, out, setting: str, seed: int, **options: Any) -> dict:
        raise UserError(lacks(self, "corpus", "`corpus build`"))

    def default_corpus(self, root, setting: str, seed: int, max_records: int | None):
        raise UserError(lacks(self, "corpus", "a run without --corpus"))

    def export_scenarios(self, named: Mapping[str, set]) -> tuple[dict, dict]:
        return {}, {}

    def leakage_rows(self) -> Iterable[GoldRow]:
        return ()

    def leakage_key(self) -> bytes:
        return b""

    def rebuilds(self, env: Mapping) -> bool:
        return False

    def reward_episode(self, env: Mapping, functions: list | None) -> RewardEpisode:
        raise ValueError(lacks(self, "reward", "the state_match reward"))

    def reward_error(self, env: Mapping) -> str | None:
        return None

    def checker_rules(self) -> tuple:
        return ()

    def category_of(self, task_id: str) -> str:
        return re.sub(r"_\d+$", "", task_id)

    def train_view(self, corpus: Any, holdout: Mapping | None = None) -> Any:
        return corpus

    def dev_corpus(self, paths) -> list[str] | None:
        return None

    def holds_out_corpus(self) -> bool:
        return False

    def task_score(self, trajectory: Mapping) -> float:
        return float(trajectory["outcome"]["success"])


def lacks(env: Any, capability: str, needed_by: str) -> str:
    """One sentence: `needed_by` needs a capability `env` does not declare."""
    members, gives = CAPABILITIES[capability]
    return (f"{needed_by} needs an environment that {gives}; {env.name} does not declare it "
            f"(it defines none of {', '.join(members)}): choose another --benchmark")


def require(env: Declared, capability: str, needed_by: str) -> None:
    """UserError, before any expensive work, when `env` lacks `capability`."""
    if not env.declares(capability):
        raise UserError(lacks(env, capability, needed_by))
