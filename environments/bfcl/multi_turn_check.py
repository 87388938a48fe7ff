"""BFCL multi-turn calls executed and checked on fresh backends: which functions each turn of a
task offers (`Schedule`: miss_func reveals), backends that enforce that offer (`TurnRunner`), a
trajectory's call as the call string BFCL's checker executes (`as_call_string`), and BFCL's own
`multi_turn_checker` run on fresh instances (`official_check`) or turn by turn with no early stop
(`turn_checks`). environments/bfcl/multi_turn.py builds the benchmark's episodes, step items and
verdicts on them.
"""
from __future__ import annotations

import importlib
import types
from typing import Any, Mapping

from environments.bfcl.backends import CallError, Episode as Backends, format_call, parse_call
from environments.bfcl.common import call_parts, error_observation, short

_CHECKER = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
_EMPTY = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils").is_empty_execute_response
INVALID_CALL = "<invalid call>"  # a call that could not be read; executes as an error


# --------------------------------------------------------------------------------------------
# the function offer of each turn, enforced on fresh backends


class Schedule:
    """Which functions are offered at each turn of an entry (miss_func reveals)."""

    def __init__(self, entry: Mapping):
        self.docs = [dict(d) for d in entry["function"]]
        self.reveal: dict[int, list[dict]] = {int(k): list(v) for k, v in (entry.get("missed_function") or {}).items()}
        self.all_names = [d["name"] for d in self.docs] + [d["name"] for t in sorted(self.reveal) for d in self.reveal[t]]

    def docs_at(self, turn: int) -> list[dict]:
        docs = list(self.docs)
        for t in sorted(self.reveal):
            if t <= turn:
                docs.extend(self.reveal[t])
        return docs

    def names_at(self, turn: int) -> frozenset[str]:
        return frozenset(d["name"] for d in self.docs_at(turn))


class TurnRunner:
    """Fresh backends for an entry with the function offer of the current turn enforced."""

    def __init__(self, entry: Mapping, schedule: Schedule, long_context: bool | None = None, *, gate: bool = True):
        self.schedule = schedule
        self.gate = gate  # False for the ground truth, which BFCL runs ungated (see multi_turn.EXCLUDED)
        self.backends = Backends(entry, functions=schedule.all_names, long_context=long_context)
        self.turn = 0
        self.offered = schedule.names_at(0) if gate else frozenset(schedule.all_names)

    def set_turn(self, turn: int) -> None:
        self.turn = turn
        if self.gate:
            self.offered = self.schedule.names_at(turn)

    def call(self, name: str, args: Mapping) -> str:
        if name not in self.offered:
            return error_observation(f"name '{short(name, 80)}' is not defined")
        return self.backends.call(name, args)

    def execute_str(self, call_str: str) -> str:
        """A python call string (ground truth, or a trajectory call as the checker sees it)."""
        try:
            name, args, kwargs = parse_call(call_str)
        except CallError as exc:
            return error_observation(str(exc))
        if name not in self.offered:
            return error_observation(f"name '{short(name, 80)}' is not defined")
        return self.backends._invoke(name, args, kwargs)

    def execute_call(self, call: Any) -> str:
        try:
            name, args = call_parts(call)
        except CallError as exc:
            return error_observation(str(exc))
        return self.call(name, args)


def as_call_string(call: Any) -> str:
    """A trajectory tool call as the python call string the checker executes."""
    try:
        name, args = call_parts(call)
    except CallError:
        return INVALID_CALL
    if not name.isidentifier():
        return INVALID_CALL
    try:
        text = format_call(name, args)
        parse_call(text)
    except (CallError, ValueError, RecursionError):
        return INVALID_CALL
    return text


# --------------------------------------------------------------------------------------------
# the official checker on fresh instances


class _CheckSession:
    """Stands in for `execute_multi_turn_func_call` during one `multi_turn_checker` call: one
    fresh set of backends per `model_name` (the model's and the ground truth's), kept across the
    checker's turns and dropped with the session. The model's calls see the function offer of
    the current turn (the checker executes the ground truth once per turn, after the model)."""

    def __init__(self, entry: Mapping, schedule: Schedule):
        self.entry = entry
        self.schedule = schedule
        self.runners: dict[str, TurnRunner] = {}
        self.gt_turns = 0

    def execute(self, func_call_list, initial_config, involved_classes, model_name, test_entry_id,
                long_context=False, is_evaL_run=False):
        runner = self.runners.get(model_name)
        ground_truth = model_name.endswith("_ground_truth")
        if runner is None:
            runner = self.runners[model_name] = TurnRunner(self.entry, self.schedule, long_context=long_context,
                                                        gate=not ground_truth)
        runner.set_turn(self.gt_turns)
        results = [runner.execute_str(c) for c in func_call_list]
        if ground_truth:
            self.gt_turns += 1
        return results, runner.backends.instances


def official_check(entry: Mapping, decoded: list[list[list[str]]], ground_truth: list[list[str]],
                   model_name: str = "curateevo") -> dict:
    """BFCL's `multi_turn_checker` on `decoded` (per turn, per step, call strings), its executor
    replaced by fresh instances for this call only (no globals touched; safe concurrently)."""
    session = _CheckSession(entry, Schedule(entry))
    scope = dict(vars(_CHECKER))
    scope["execute_multi_turn_func_call"] = session.execute
    fn = _CHECKER.multi_turn_checker
    checker = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    category = entry["id"].rsplit("_", 1)[0]
    return checker(decoded, ground_truth, entry, category, model_name)


def turn_checks(entry: Mapping, decoded: list[list[list[str]]], ground_truth: list[list[str]]) -> list[dict]:
    """The checker's per-turn checks on every turn (no early stop): one dict per turn with
    "valid" and, when not, the checker's error."""
    schedule = Schedule(entry)
    category = entry["id"].rsplit("_", 1)[0]
    long_context = "long_context" in category or "composite" in category
    model = TurnRunner(entry, schedule, long_context)
    gold = TurnRunner(entry, schedule, long_context, gate=False)
    so_far: list[str] = []
    out: list[dict] = []
    for t, gt in enumerate(ground_truth):
        model.set_turn(t)
        gold.set_turn(t)
        steps = decoded[t] if t < len(decoded) else []
        for step in steps:
            so_far.extend(model.execute_str(c) for c in step)
        expected = [gold.execute_str(c) for c in gt]
        if t >= len(decoded):
            out.append({"valid": False, "error_type": "multi_turn:force_terminated",
                        "error_message": f"the trajectory ended before turn {t}"})
            continue
        if not gt:
            made = not (not steps or _EMPTY(steps))
            out.append({"valid": True} if not made else {
                "valid": False, "error_type": "multi_turn:irrelevance_error:decoder_success",
                "error_message": f"Model outputs valid function calls when it should not for turn {t}."})
            continue
        if not steps or _EMPTY(steps):
            out.append({"valid": False, "error_type": "multi_turn:empty_turn_model_response",
                        "error_message": f"Model response list is empty for turn {t}"})
            continue
        result = _CHECKER.state_checker(model.backends.instances, gold.backends.instances)
        if result["valid"]:
            result = _CHECKER.response_checker(so_far, expected, t)
        out.append(result)
    return out
