"""BFCL-V4 multi-turn as a benchmark ("bfcl"): the `base`, `miss_func`, `miss_param` and
`long_context` tasks of the installed `bfcl-eval`, run on fresh backends and scored with BFCL's
own `multi_turn_checker`.

- Episodes: backends built fresh per episode (environments.bfcl.backends.Episode: `ast`-parsed
  literal calls dispatched to methods, no `eval`, no module-global instances), so episodes can
  run concurrently. Only offered functions can be called; a `miss_func` task's held-out function
  becomes callable (and is offered) from the turn that reveals it, whose user message is BFCL's
  own ("I have updated some more functions you can choose from. What about now?").
- Scoring (environments/bfcl/multi_turn_check.py): the trajectory's tool calls, per user turn and
  assistant message, are re-executed by BFCL's `multi_turn_checker` code itself, run with its
  executor replaced by a safe one that builds fresh instances for this one check (the official
  executor `eval`s model text and caches instances forever; shared/FIELD-NOTES.md). The checker's
  verdict is `success`; `turn_pass` applies the checker's per-turn checks (its own `state_checker`
  and `response_checker`) to every turn instead of stopping at the first failure; a turn whose
  ground truth is empty passes when the model made no call in it (BFCL's irrelevance rule).
  `reward` is 1 for success, else the fraction of turns passed. A trajectory with fewer user turns
  than the task failed as BFCL's runner fails it ("force_terminated").
- Step items: for each position of the gold trajectory (every gold call, and the plain reply that
  closes each turn), the gold prefix and the gold next action; `meta.kind` says which: "call",
  "stop" (the reply after a turn's gold calls) or "abstain" (a turn whose gold has no call: a
  missing parameter or function). Replies are about 40% of the items, so a policy that never
  calls scores about 0.4 over all kinds; count "call" items alone where that floor matters. A policy's action is right when,
  executed after the gold prefix on fresh backends, it leaves the same backend state as the gold
  action and its outputs contain the gold action's outputs (the checker's rules for one step);
  the closing reply is right when the policy makes no call.
"""
from __future__ import annotations

import copy
import importlib
import json
from functools import lru_cache
from typing import Any, Mapping, Sequence

from base.benchmark import StepItem, Task, Verdict, balanced_subset, check_split
from environments.bfcl import backends, splits
from environments.bfcl.backends import Episode as Backends, tool_schema
from environments.bfcl.common import (
    bounded,
    closing_reply,
    contains_all,
    error_observation,
    is_error,
    short,
    split_turns,
    tool_call_message,
)
from environments.bfcl.multi_turn_check import (
    INVALID_CALL,
    Schedule,
    TurnRunner,
    as_call_string,
    official_check,
    turn_checks,
)
from base.errors import UserError

NAME = "bfcl"
ENV_BENCHMARK = "bfcl_multi_turn"   # meta.env.benchmark of tasks and corpus records
VARIANTS = ("base", "miss_func", "miss_param", "long_context")
REVEAL_MESSAGE = importlib.import_module("bfcl_eval.constants.default_prompts").DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
MAX_STEPS_PER_TURN = 20  # BFCL's MAXIMUM_STEP_LIMIT: more steps in one turn fail the task
# Tasks left out of tasks(): with withheld functions not callable before their reveal (as this
# environment enforces; BFCL's executor does not), no answer can pass them.
EXCLUDED = {
    "multi_turn_miss_func_49": "its ground truth calls the held-out function `tail` in turn 1, "
                               "before the turn-3 reveal",
}


_SCHEMAS: dict[str, dict] = {}


def _tool(doc: Mapping) -> dict:
    """The OpenAI schema of a multi-turn function doc, converted once per function name (BFCL's
    128 multi-turn functions have unique names). Shared: treat it as read-only."""
    schema = _SCHEMAS.get(doc["name"])
    if schema is None:
        schema = _SCHEMAS[doc["name"]] = tool_schema(doc)
    return schema


def category_of(variant: str) -> str:
    return f"multi_turn_{variant}"


def variant_of(name: str) -> str:
    v = name.removeprefix("multi_turn_")
    if v not in VARIANTS:
        raise UserError(f"unknown bfcl category {name!r} (one of {', '.join(VARIANTS)})")
    return v


def task_id(variant: str, number: int) -> str:
    return f"multi_turn_{variant}_{number}"


def parse_task_id(tid: str) -> tuple[str, int]:
    head, _, num = tid.rpartition("_")
    if not num.isdigit():
        raise UserError(f"not a BFCL multi-turn task id: {tid!r}")
    return variant_of(head), int(num)


# --------------------------------------------------------------------------------------------
# data (read whole once; every access to one task goes through MultiTurnBenchmark._entry)


@lru_cache(maxsize=None)
def _category_entries(variant: str) -> dict[str, dict]:
    return backends.load_tasks(category_of(variant))


@lru_cache(maxsize=None)
def _category_truth(variant: str) -> dict[str, list[list[str]]]:
    return backends.load_ground_truth(category_of(variant))


# --------------------------------------------------------------------------------------------
# episodes


class MultiTurnEpisode:
    """One run of a task: user turns handed out in order, calls executed on fresh backends."""

    def __init__(self, task: Task, entry: Mapping):
        self.task = task
        self._schedule = Schedule(entry)
        self._runner = TurnRunner(entry, self._schedule)
        self._next = 0
        self.calls: list[list[tuple[Any, str]]] = []  # per turn: (call as given, observation)

    @property
    def turn(self) -> int:
        """The index of the current user turn (-1 before the first)."""
        return self._next - 1

    def next_turn(self) -> list | None:
        if self._next >= len(self.task.turns):
            return None
        turn = self._next
        self._next += 1
        self._runner.set_turn(turn)
        self.calls.append([])
        return copy.deepcopy(self.task.turns[turn])

    def offered_tools(self) -> list:
        return [_tool(d) for d in self._schedule.docs_at(max(self.turn, 0))]

    def execute(self, calls: list) -> list:
        if not isinstance(calls, (list, tuple)):
            calls = [calls]
        if not self.calls:
            self.calls.append([])
        out = []
        for call in calls:
            try:
                obs = self._runner.execute_call(call)
            except Exception as exc:  # never raises: a backend bug becomes an observation
                obs = error_observation(f"{type(exc).__name__}: {exc}")
            self.calls[-1].append((call, obs))
            out.append(obs)
        return out

    def state(self) -> dict:
        """The backends' public attributes (what BFCL's state check compares)."""
        return self._runner.backends.state()

    def rng_states(self) -> dict:
        """The backends' private RNG states (IDs and tokens come from them)."""
        return self._runner.backends.rng_states()


def _feedback(official: dict, per_turn: list[dict], tool_errors: list[dict], n_turns: int,
              n_model_turns: int, invalid_calls: int) -> dict:
    fb: dict[str, Any] = {
        "error_type": None if official.get("valid") else official.get("error_type"),
        "checker_message": None if official.get("valid") else short(official.get("error_message", "")),
        "failed_turn": next((t for t, r in enumerate(per_turn) if not r["valid"]), None),
        "turns": n_turns,
        "turns_reached": n_model_turns,
        "tool_errors": tool_errors[:20],
        "invalid_calls": invalid_calls,
    }
    details = official.get("details") or {}
    if official.get("error_type") == "multi_turn:instance_state_mismatch":
        fb["state_diff"] = bounded(details.get("differences"))
    if official.get("error_type") == "multi_turn:execution_response_mismatch":
        fb["missing_items"] = bounded(details.get("missing_items"))
    fb["turn_errors"] = [{"turn": t, "error_type": r.get("error_type")} for t, r in enumerate(per_turn) if not r["valid"]]
    return fb


# --------------------------------------------------------------------------------------------
# the benchmark


class MultiTurnBenchmark:
    """`get_benchmark("bfcl", allow_test=False, variants=None, splits_path=None)`."""

    name = NAME

    def __init__(self, allow_test: bool = False, variants: Sequence[str] | None = None,
                 splits_path: str | None = None):
        self.allow_test = allow_test
        self.variants = tuple(variant_of(v) for v in (variants or VARIANTS))
        self.splits_path = splits_path

    # -- data access: every per-task read goes through these two (the train-only test hooks them)

    def _entry(self, tid: str) -> dict:
        """The BFCL entry of a task: shared and read-only (backends deep-copy the configs they load)."""
        variant, number = parse_task_id(tid)
        entry = _category_entries(variant).get(tid)
        if entry is None:
            raise UserError(f"unknown BFCL task {tid!r}")
        return entry

    def _ground_truth(self, tid: str) -> list[list[str]]:
        variant, _ = parse_task_id(tid)
        return copy.deepcopy(_category_truth(variant)[tid])

    def split_numbers(self, split: str) -> list[int]:
        check_split(split, self.allow_test)
        return splits.multi_turn_split(split, self.splits_path)

    def describe(self) -> dict:
        """What a run records about this benchmark."""
        return {"name": NAME, "variants": list(self.variants), "excluded": dict(EXCLUDED),
                "splits": splits.describe(self.splits_path), "checker": "bfcl_eval multi_turn_checker",
                "max_steps_per_turn": MAX_STEPS_PER_TURN}

    # -- Benchmark protocol

    def tasks(self, split: str, limit: int | None = None, categories=None) -> list[Task]:
        """Tasks of `split`, variant by variant (VARIANTS order), scenario numbers ascending;
        `limit` keeps a subset balanced over the variants."""
        variants = self.variants if categories is None else tuple(variant_of(c) for c in categories)
        numbers = self.split_numbers(split)
        groups = [[task_id(variant, n) for n in numbers if task_id(variant, n) not in EXCLUDED] for variant in variants]
        return [self.make_task(tid, split) for tid in balanced_subset(groups, limit)]

    def make_task(self, tid: str, split: str | None = None) -> Task:
        entry = self._entry(tid)
        variant, number = parse_task_id(tid)
        schedule = Schedule(entry)
        turns = []
        for t, question in enumerate(entry["question"]):
            if t in schedule.reveal and not question:
                question = [{"role": "user", "content": REVEAL_MESSAGE}]
            turns.append([{"role": m["role"], "content": m["content"]} for m in question])
        meta = {
            "env": {"benchmark": ENV_BENCHMARK, "task_id": tid, "variant": variant},
            "scenario": number,
            "involved_classes": list(entry["involved_classes"]),
            "revealed_functions": {str(t): [d["name"] for d in docs] for t, docs in sorted(schedule.reveal.items())},
            "max_steps_per_turn": MAX_STEPS_PER_TURN,
        }
        if split is not None:
            meta["split"] = split
        return Task(id=tid, benchmark=NAME, category=variant, tools=[_tool(d) for d in schedule.docs_at(0)],
                    turns=turns, meta=meta)

    def episode(self, task: Task) -> MultiTurnEpisode:
        return MultiTurnEpisode(task, self._entry(task.id))

    def decode(self, messages: Sequence[Mapping]) -> tuple[int, list[list[list[str]]], int]:
        """(user turns in the trajectory, per turn the call strings of each assistant message
        that made calls, how many calls could not be read)."""
        opens, steps = split_turns(messages)
        invalid = 0
        decoded: list[list[list[str]]] = []
        for turn_steps in steps:
            turn: list[list[str]] = []
            for calls in turn_steps:
                strs = [as_call_string(c) for c in calls]
                invalid += sum(s == INVALID_CALL for s in strs)
                if strs:
                    turn.append(strs)
            decoded.append(turn)
        return len(opens), decoded, invalid

    def score(self, task: Task, messages: list) -> Verdict:
        entry = self._entry(task.id)
        gt = self._ground_truth(task.id)
        n_turns, decoded, invalid = self.decode(messages)
        if n_turns > len(gt):
            decoded = decoded[:len(gt)]
        if len(decoded) != len(gt):
            official = {"valid": False, "error_type": "multi_turn:force_terminated",
                        "error_message": f"The trajectory has {len(decoded)} user turns; the task has {len(gt)}."}
        else:
            official = official_check(entry, decoded, gt)
        per_turn = turn_checks(entry, decoded, gt)
        turn_pass = [bool(r["valid"]) for r in per_turn]
        success = bool(official.get("valid"))
        # a failed task always has a failed turn with ground truth, so its reward stays below 1
        reward = 1.0 if success else (sum(turn_pass) / len(turn_pass) if turn_pass else 0.0)
        tool_errors = _tool_errors(messages)
        return Verdict(success=success, reward=reward, turn_pass=turn_pass,
                       feedback=_feedback(official, per_turn, tool_errors, len(gt), n_turns, invalid))

    def gold_turns(self, task: Task) -> list[list[tuple[str, dict, str]]]:
        """The ground truth as (name, keyword arguments as JSON values, call string) per turn."""
        entry = self._entry(task.id)
        probe = Backends(entry, functions=Schedule(entry).all_names)
        out = []
        for turn in self._ground_truth(task.id):
            calls = []
            for s in turn:
                name, kwargs = probe.to_tool_call(s)
                calls.append((name, json.loads(json.dumps(kwargs, ensure_ascii=False)), s))
            out.append(calls)
        return out

    def step_items(self, task: Task) -> list[StepItem]:
        entry = self._entry(task.id)
        schedule = Schedule(entry)
        gold = self.gold_turns(task)
        runner = TurnRunner(entry, schedule, gate=False)
        messages: list[dict] = []
        items: list[StepItem] = []
        n = 0
        for t, calls in enumerate(gold):
            runner.set_turn(t)
            messages.extend(copy.deepcopy(task.turns[t]))
            tools = [_tool(d) for d in schedule.docs_at(t)]
            last = None
            for j in range(len(calls) + 1):
                if j < len(calls):
                    name, args, _ = calls[j]
                    gold_action = [{"name": name, "arguments": json.dumps(args, ensure_ascii=False)}]
                else:
                    gold_action = []
                items.append(StepItem(task_id=task.id, index=len(items), messages=copy.deepcopy(messages),
                                      tools=tools, gold=gold_action,
                                      meta={"env": dict(task.meta["env"]), "turn": t, "step": j,
                                            "kind": "call" if j < len(calls) else ("stop" if calls else "abstain")}))
                if j < len(calls):
                    cid = f"call_{n}"
                    n += 1
                    obs = runner.call(name, args)
                    messages.append(tool_call_message([(cid, name, args)]))
                    messages.append({"role": "tool", "tool_call_id": cid, "name": name, "content": obs})
                    last = (name, obs)
            messages.append({"role": "assistant", "content": closing_reply(last)})
        return items

    def judge_step(self, item: StepItem, calls: list) -> bool:
        turn, step = item.meta["turn"], item.meta["step"]
        calls = list(calls or [])
        if not item.gold:
            return not calls
        if not calls:
            return False
        entry = self._entry(item.task_id)
        gold_turns = [[s for s in turn_calls] for turn_calls in self._ground_truth(item.task_id)]
        schedule = Schedule(entry)
        model, gold = TurnRunner(entry, schedule), TurnRunner(entry, schedule, gate=False)
        for r in (model, gold):
            for t in range(turn + 1):
                r.set_turn(t)
                for s in (gold_turns[t] if t < turn else gold_turns[t][:step]):
                    r.backends.execute(s)  # the gold prefix, ungated as BFCL runs ground truth
        outputs = [model.execute_call(c) for c in calls]
        expected = [gold.execute_str(gold_turns[turn][step])]
        return model.backends.state() == gold.backends.state() and contains_all(outputs, expected)


def _tool_errors(messages: Sequence[Mapping]) -> list[dict]:
    """Error observations in the trajectory, with the call that caused them."""
    names: dict[str, tuple[str, str]] = {}
    out = []
    turn = -1
    prev = None
    for m in messages:
        role = m.get("role")
        if role == "user" and prev != "user":
            turn += 1
        if role == "assistant":
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                names[c.get("id", "")] = (str(fn.get("name", "")), str(fn.get("arguments", "")))
        elif role == "tool" and isinstance(m.get("content"), str) and is_error(m["content"]):
            name, args = names.get(m.get("tool_call_id", ""), ("", ""))
            out.append({"turn": turn, "call": short(f"{name}({args})", 200), "observation": short(m["content"], 300)})
        if role != "system":
            prev = role
    return out
