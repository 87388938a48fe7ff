"""The ScienceWorld simulator (PyPI `scienceworld`: its wheel ships the Java simulator, driven
over py4j; needs `java` on PATH) behind one small class, pooled per process.

    with simulator() as sim:                      # a started JVM from this process's pool
        first = sim.start("boil", 3)              # load + reset: the task text and first look
        sim.step("open door to kitchen")          # -> Step(observation, score, done)
        sim.gold()                                # the simulator's own gold action sequence

A JVM takes seconds to start and a few hundred MB, so simulators are kept and reused: each is
loaded afresh (`load` + `reset`) for every task, which restores the variation's initial world
exactly (a variation is a seed: same actions, same observations). One simulator serves one
episode at a time; the pool grows to the number of episodes alive at once.
"""
from __future__ import annotations

import contextlib
import shutil
import threading
from dataclasses import dataclass
from typing import Iterator

from base.errors import UserError

SIMPLIFICATION = "easy"   # ScienceWorld's preset: teleport, open doors, no electrical actions, self-watering pots
ENV_STEP_LIMIT = 10_000   # the simulator's own cap; episodes are bounded by the runner's step limit


@dataclass(frozen=True)
class Step:
    observation: str
    score: int          # the simulator's task score, 0..100 (negative when the task failed for good)
    done: bool          # the simulator says the task is over (completed, or failed for good)


def _env_class():
    if shutil.which("java") is None:
        raise UserError("ScienceWorld needs Java (a JRE 11+ `java` on PATH); install it, e.g. "
                        "`apt-get install openjdk-17-jre-headless`")
    try:
        from scienceworld import ScienceWorldEnv
    except ImportError as exc:
        raise UserError(f"ScienceWorld is not installed ({exc}); `pip install scienceworld`") from None
    return ScienceWorldEnv


class Simulator:
    """One JVM running ScienceWorld."""

    def __init__(self):
        self._env = _env_class()("", envStepLimit=ENV_STEP_LIMIT)
        self.loaded: tuple[str, int] | None = None

    def task_names(self) -> list[str]:
        return list(self._env.get_task_names())

    def variations(self, task: str) -> dict[str, list[int]]:
        """The simulator's own train/dev/test variation lists of a task (disjoint by design)."""
        self._env.load(task, 0, SIMPLIFICATION)
        return {"train": sorted(self._env.get_variations_train()), "dev": sorted(self._env.get_variations_dev()),
                "test": sorted(self._env.get_variations_test())}

    def start(self, task: str, variation: int, gold: bool = False) -> dict:
        """Load and reset a task variation: {"description", "observation"} (the first look)."""
        self._env.load(task, int(variation), SIMPLIFICATION, generateGoldPath=gold)
        observation, _ = self._env.reset()
        self.loaded = (task, int(variation))
        return {"description": self._env.get_task_description(), "observation": observation}

    def step(self, action: str) -> Step:
        observation, _, done, info = self._env.step(str(action))
        return Step(observation=observation, score=int(info["score"]), done=bool(done))

    def gold(self) -> list[str]:
        """The gold action sequence of the loaded variation (start(..., gold=True) first)."""
        actions = list(self._env.get_gold_action_sequence())
        if actions and actions[0].startswith("ERROR"):
            raise RuntimeError(actions[0])
        return actions

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._env.close()


_POOL: list[Simulator] = []
_LOCK = threading.Lock()


@contextlib.contextmanager
def simulator() -> Iterator[Simulator]:
    """A simulator from the process's pool (started when none is free), returned after use."""
    sim = acquire()
    try:
        yield sim
    finally:
        release(sim)


def acquire() -> Simulator:
    with _LOCK:
        if _POOL:
            return _POOL.pop()
    return Simulator()


def release(sim: Simulator) -> None:
    with _LOCK:
        _POOL.append(sim)


def run(task: str, variation: int, actions: list[str]) -> tuple[dict, list[Step]]:
    """A fresh run of `actions` on a task variation: (start, one Step per action). Actions after
    the simulator says the task is over are not taken."""
    with simulator() as sim:
        first = sim.start(task, variation)
        steps: list[Step] = []
        for action in actions:
            if steps and steps[-1].done:
                break
            steps.append(sim.step(action))
        return first, steps
