"""ScienceWorld as a benchmark ("scienceworld"): the catalog's task variations (catalog.py) run
in the simulator itself (simulator.py) and scored by its own task score.

- Tasks: one per catalog entry of the split, grouped by task type (the category), variations
  ascending; `limit` keeps a subset balanced over task types. One user turn (the description and
  the first look around), one tool `act` (actions.py).
- Episodes: a simulator from the process's pool, loaded and reset for the task; each `act` call
  is one simulator step and its observation. Once the simulator says the task is over, further
  calls are answered without a step. At most MAX_STEPS actions (the runner's step limit).
- Scoring (official): the trajectory's actions are run on a freshly loaded variation and the
  simulator's score after the last one is the verdict: `success` when it reaches 100 (the task's
  completion), `reward` = max(score, 0) / 100 (ScienceWorld's partial credit; a task failed for
  good scores -100, reward 0). Episodes remember their own final score, so scoring a trajectory
  the episode just produced does not run it again (the simulator is deterministic per variation).
- Failure feedback: error types in the checkers' vocabulary the diagnosis reads —
  `scienceworld:empty_turn_model_response` (no action), `scienceworld:instance_state_mismatch`
  (the task failed for good, e.g. a focus on the wrong object), `scienceworld:force_terminated`
  (stopped, or cut at the step limit, before completing) — with the score, the invalid actions and
  the repeated ones.
- Step items: every step of the gold run: the gold prefix with its real observations and the gold
  action; an answer is right when it is the gold action (normalised), or, run after the gold
  prefix, gives the gold action's observation and score.
"""
from __future__ import annotations

import copy
import json
from collections import OrderedDict
from typing import Mapping, Sequence

from base.errors import UserError
from base.benchmark import StepItem, Task, Verdict, balanced_subset, check_split
from environments.scienceworld import actions as act
from environments.scienceworld import catalog, simulator

NAME = "scienceworld"
ENV_BENCHMARK = "scienceworld"   # meta.env.benchmark of tasks and corpus records
MAX_STEPS = 50
_SCORED: "OrderedDict[tuple, tuple[int, bool, list[str]]]" = OrderedDict()   # (task, actions) -> run result
_SCORED_MAX = 4096


def _remember(key: tuple, value: tuple) -> None:
    _SCORED[key] = value
    _SCORED.move_to_end(key)
    while len(_SCORED) > _SCORED_MAX:
        _SCORED.popitem(last=False)


def make_task(entry: Mapping) -> Task:
    meta = {"env": {"benchmark": ENV_BENCHMARK, "task_id": entry["id"], "variant": entry["task"]},
            "task_type": entry["task"], "variation": entry["variation"], "split": entry["split"],
            "max_steps_per_turn": MAX_STEPS, "gold_steps": len(entry["gold"])}
    return Task(id=entry["id"], benchmark=NAME, category=entry["task"], tools=[act.ACT_TOOL],
                turns=[[{"role": "user", "content": act.user_text(entry["description"], entry["observation"])}]],
                meta=meta)


class ScienceWorldEpisode:
    """One run of a task on a pooled simulator."""

    def __init__(self, task: Task, entry: Mapping):
        self.task, self.entry = task, entry
        self._sim = None
        self._given = False
        self.actions: list[str] = []
        self.score, self.done = 0, False

    def next_turn(self) -> list | None:
        if self._given:
            self.close()
            return None
        self._given = True
        self._sim = simulator.acquire()
        self._sim.start(self.entry["task"], self.entry["variation"])
        return copy.deepcopy(self.task.turns[0])

    def offered_tools(self) -> list:
        return [act.ACT_TOOL]

    def execute(self, calls: list) -> list:
        out = []
        for call in calls if isinstance(calls, (list, tuple)) else [calls]:
            action = act.action_of(call) if isinstance(call, Mapping) else None
            if action is None:
                name = (call.get("function", call).get("name") if isinstance(call, Mapping) else None)
                out.append(f"Error: only the tool '{act.TOOL_NAME}' with a string argument 'action' exists"
                           + (f" (called {str(name)[:80]!r})" if name and name != act.TOOL_NAME else ""))
                continue
            if self.done or self._sim is None:
                out.append(act.DONE_MESSAGE)
                continue
            try:
                step = self._sim.step(action)
            except Exception as exc:   # never raises: a simulator failure becomes an observation
                out.append(f"Error: the simulator failed ({type(exc).__name__})")
                continue
            self.actions.append(action)
            self.score, self.done = step.score, step.done
            out.append(step.observation)
        _remember((self.task.id, tuple(self.actions)), (self.score, self.done, []))
        return out

    def close(self) -> None:
        if self._sim is not None:
            simulator.release(self._sim)
            self._sim = None

    def __del__(self):
        self.close()


def run_actions(entry: Mapping, actions: Sequence[str]) -> tuple[int, bool, list[str]]:
    """(final score, over, observations) of `actions` on a fresh load of the entry's variation;
    actions after the task is over are not taken."""
    key = (entry["id"], tuple(actions))
    if key in _SCORED and _SCORED[key][2]:
        return _SCORED[key]
    if not actions:
        return 0, False, []
    _, steps = simulator.run(entry["task"], entry["variation"], list(actions))
    result = (steps[-1].score, steps[-1].done, [s.observation for s in steps])
    _remember(key, result)
    return result


class ScienceWorldBenchmark:
    """`get_benchmark("scienceworld", allow_test=False)`."""

    name = NAME

    def __init__(self, allow_test: bool = False, **_ignored):
        self.allow_test = allow_test

    def _entry(self, tid: str) -> dict:
        entry = catalog.entries().get(tid)
        if entry is None:
            raise UserError(f"unknown ScienceWorld task {tid!r}")
        if entry["split"] == "test" and not self.allow_test:
            check_split("test", False)
        return entry

    def describe(self) -> dict:
        doc = catalog.load()
        return {"name": NAME, "scienceworld": doc["scienceworld"], "simplification": doc["simplification"],
                "seed": doc["seed"], "per_split": doc["per_split"], "max_steps": MAX_STEPS,
                "checker": "ScienceWorld task score (100 = completed)",
                "tasks": {s: len(catalog.split_ids(s)) for s in ("train", "dev", "test")}}

    def tasks(self, split: str, limit: int | None = None, categories=None) -> list[Task]:
        check_split(split, self.allow_test)
        ids = catalog.split_ids(split)
        entries = catalog.entries()
        types = sorted({entries[i]["task"] for i in ids})
        if categories is not None:
            unknown = sorted(set(categories) - set(types))
            if unknown:
                raise UserError(f"unknown ScienceWorld task type(s) {', '.join(unknown)} (known: {', '.join(types)})")
            types = [t for t in types if t in set(categories)]
        groups = [sorted((i for i in ids if entries[i]["task"] == t), key=lambda i: entries[i]["variation"])
                  for t in types]
        return [make_task(entries[i]) for i in balanced_subset(groups, limit)]

    def episode(self, task: Task) -> ScienceWorldEpisode:
        return ScienceWorldEpisode(task, self._entry(task.id))

    def score(self, task: Task, messages: list) -> Verdict:
        entry = self._entry(task.id)
        actions, invalid_calls = act.actions_of(messages)
        remembered = _SCORED.get((task.id, tuple(actions)))
        if remembered is not None:
            score, over = remembered[0], remembered[1]
            observations = [m.get("content", "") for m in messages if m.get("role") == "tool"]
        else:
            score, over, observations = run_actions(entry, actions)
        success = score >= 100
        feedback = _feedback(actions, observations, score, over, success, invalid_calls, len(entry["gold"]))
        return Verdict(success=success, reward=max(score, 0) / 100.0, turn_pass=[success], feedback=feedback)

    def gold_messages(self, task: Task) -> list[dict]:
        """The gold run as a canonical trajectory (its real observations)."""
        entry = self._entry(task.id)
        return act.render(task.turns[0][0]["content"], entry["gold"], [s["observation"] for s in entry["trace"]])

    def step_items(self, task: Task) -> list[StepItem]:
        entry = self._entry(task.id)
        messages = self.gold_messages(task)
        items = []
        for j, action in enumerate(entry["gold"]):
            items.append(StepItem(task_id=task.id, index=j, messages=copy.deepcopy(messages[:1 + 2 * j]),
                                  tools=[act.ACT_TOOL],
                                  gold=[{"name": act.TOOL_NAME, "arguments": json.dumps({"action": action})}],
                                  meta={"env": dict(task.meta["env"]), "turn": 0, "step": j, "kind": "call"}))
        return items

    def judge_step(self, item: StepItem, calls: list) -> bool:
        calls = list(calls or [])
        if len(calls) != 1:
            return False
        action, gold = act.action_of(calls[0]), act.action_of(item.gold[0])
        if action is None:
            return False
        if act.normalize(action) == act.normalize(gold):
            return True
        entry = self._entry(item.task_id)
        prefix = entry["gold"][:item.meta["step"]]
        score, _, observations = run_actions(entry, [*prefix, action])
        want = entry["trace"][item.meta["step"]]
        return len(observations) == len(prefix) + 1 and observations[-1] == want["observation"] \
            and score == want["score"]


def _feedback(actions: list[str], observations: list[str], score: int, over: bool, success: bool,
              invalid_calls: int, gold_steps: int) -> dict:
    invalid = [a for a, o in zip(actions, observations) if o.strip() == act.INVALID_ACTION]
    repeats = max((sum(1 for _ in run) for run in _runs(actions)), default=0)
    fb = {"score": score, "steps": len(actions), "gold_steps": gold_steps, "invalid_actions": len(invalid),
          "invalid_examples": invalid[:5], "invalid_calls": invalid_calls, "longest_repeat": repeats,
          "error_type": None, "checker_message": None}
    if success:
        return fb
    if not actions:
        fb["error_type"] = "scienceworld:empty_turn_model_response"
        fb["checker_message"] = "the agent took no action"
    elif over and score < 0:
        fb["error_type"] = "scienceworld:instance_state_mismatch"
        fb["checker_message"] = f"the task failed for good after the action {actions[-1]!r} (score {score})"
    else:
        fb["error_type"] = "scienceworld:force_terminated"
        fb["checker_message"] = f"the agent stopped after {len(actions)} actions at score {score} of 100"
    return fb


def _runs(actions: list[str]):
    run: list[str] = []
    for a in actions:
        if run and act.normalize(run[-1]) != act.normalize(a):
            yield run
            run = []
        run.append(a)
    if run:
        yield run


