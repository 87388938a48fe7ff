"""ScienceWorld as an environment (`base.environment`): the benchmark (benchmark.py), the
recorded train scenarios ctx.env gets (scenarios.py), the leakage rows, the `state_match` RL
reward on the simulator itself, and its checker's error types mapped to the failure families.
Everything heavy (the catalog, a JVM) is loaded inside the methods: importing this is cheap.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


ENV_TAG = "scienceworld"
# The benchmark's error types (benchmark.py: _feedback) → the diagnosis's failure families.
CHECKER_RULES = (
    (r"scienceworld:force_terminated", "step_limit|premature_stop"),
    (r"scienceworld:empty_turn_model_response", "empty_turn"),
    (r"scienceworld:instance_state_mismatch", "state_mismatch"),
)


def category_of(task_id: str) -> str:
    """boil-v12 → boil (the task type, as records name it in meta.env.variant)."""
    return task_id.rsplit("-v", 1)[0]


class RewardEpisode:
    """A train task's variation freshly loaded in a pooled simulator, for `state_match`: calls are
    `act` actions, the state is (score, over, last observation)."""

    def __init__(self, entry: Mapping):
        from environments.scienceworld import simulator

        self._pool = simulator
        self._sim = simulator.acquire()
        self._sim.start(entry["task"], entry["variation"])
        self._state: tuple = (0, False, entry["observation"])

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        from environments.scienceworld import actions as act

        action = act.action_of({"name": name, "arguments": dict(arguments or {})})
        if action is None:
            return f"Error: only the tool '{act.TOOL_NAME}' with a string argument 'action' exists"
        if self._state[1]:
            return act.DONE_MESSAGE
        step = self._sim.step(action)
        self._state = (step.score, step.done, step.observation)
        return step.observation

    def state(self) -> tuple:
        return self._state

    def __del__(self):
        if getattr(self, "_sim", None) is not None:
            self._pool.release(self._sim)
            self._sim = None


class ScienceWorldEnvironment:
    name = "scienceworld"
    env_tag = ENV_TAG
    metrics = ("task_success", "step_accuracy")
    export_group = "scienceworld"
    corpus_settings = ("labeled", "wild")
    family_prefix = None   # its error types go through checker_rules
    single_step = False    # a task is many actions: the step items are scored beside task success

    def benchmark(self, **options: Any):
        from environments.scienceworld.benchmark import ScienceWorldBenchmark

        return ScienceWorldBenchmark(**options)

    def build_corpus(self, out, setting: str, seed: int, **options: Any) -> dict:
        from environments.scienceworld import corpus

        info = corpus.write(out, setting, seed, categories=options.get("categories"), limit=options.get("limit"),
                            progress=options.get("progress"), max_records=options.get("max_records"))
        return {**info, "file": corpus.CORPUS_FILE}

    def default_corpus(self, root, setting: str, seed: int, max_records: int | None):
        from environments.scienceworld import corpus

        return corpus.cached(root, setting, seed, max_records) / corpus.CORPUS_FILE

    def export_scenarios(self, named: Mapping[str, set]) -> tuple[dict, dict]:
        from environments.scienceworld.scenarios import export

        return export(named)

    def leakage_rows(self):
        from base.environment import GoldRow
        from environments.scienceworld import actions as act, catalog
        from sandbox.leakage import call_key

        for tid, entry in sorted(catalog.entries().items()):
            yield GoldRow(entry["split"], tid, [act.user_text(entry["description"], entry["observation"]),
                                                entry["description"]],
                          tuple(call_key(act.TOOL_NAME, {"action": a}) for a in entry["gold"]), True)

    def leakage_key(self) -> bytes:
        from environments.scienceworld import catalog

        return Path(__file__).read_bytes() + catalog.CATALOG_PATH.read_bytes()

    def rebuilds(self, env: Mapping) -> bool:
        return env.get("benchmark") == ENV_TAG and "task_id" in env

    def reward_episode(self, env: Mapping, functions: list | None) -> RewardEpisode:
        from environments.scienceworld import catalog

        entry = catalog.entries()[env["task_id"]]
        if entry["split"] != "train":
            raise KeyError(env["task_id"])
        return RewardEpisode(entry)

    def reward_error(self, env: Mapping) -> str | None:
        if not self.rebuilds(env):
            return None
        from environments.scienceworld import catalog

        entry = catalog.entries().get(env["task_id"]) if isinstance(env["task_id"], str) else None
        if entry is None or entry["split"] != "train":
            return f"meta.env.task_id: {str(env['task_id'])[:80]!r} is not a ScienceWorld train task"
        return None

    def checker_rules(self) -> tuple:
        return CHECKER_RULES

    def category_of(self, task_id: str) -> str:
        return category_of(task_id)
