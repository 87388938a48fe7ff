"""BFCL-V4 single-turn as a benchmark ("bfcl-single"): `simple_python`, `multiple`, `parallel`,
`parallel_multiple` and `irrelevance`, plus the `live_*` categories as a harder held-out set
(dev/test only), judged by BFCL's official `ast_checker`.

A task is one user request (some live ones open with a system message) and the functions on
offer; the answer is the calls of the first assistant message. The calls are nowhere executed:
`Episode.execute` checks that a call names an offered function with JSON-object arguments and
answers "recorded" (task meta `max_steps_per_turn` is 1: the runner should stop after the first
assistant message). Scoring follows BFCL's runners: for `irrelevance` / `live_irrelevance`
success is making no (parseable) call, for `live_relevance` making one, otherwise the calls go
to `ast_checker(docs, [{name: args}], possible_answer, Language.PYTHON, category, model)` with a
registered model key whose function names keep their dots. An assistant message without
`tool_calls` is read with the chat format's parser (chat_format.chat_format), so text the runner
could not turn into calls is judged as BFCL judges undecodable output.

The four live entries whose ground truth no answer satisfies are excluded
(`environments.bfcl.splits.UNSATISFIABLE`). The categories' data is read by single_turn_data.py.
"""
from __future__ import annotations

import collections
import copy
import importlib
import importlib.util
import json
import sys
import types
from typing import Any, Mapping, Sequence

from base.benchmark import StepItem, Task, Verdict, balanced_subset, check_split
from environments.episodes import Recorded
from environments.bfcl import splits
from environments.bfcl.backends import CallError, tool_schema
from environments.bfcl.common import bounded, call_parts, short
from environments.bfcl.single_turn_data import (CATEGORIES, LIVE_CATEGORIES, NO_ANSWER, NO_CALL, SINGLE_TURN_CATEGORIES, answers,
                                              category_of, entries)
from environments.bfcl.splits import UNSATISFIABLE
from base.errors import UserError
from chat_format.chat_format import parse_tool_calls

NAME = "bfcl-single"
ENV_BENCHMARK = "bfcl_single_turn"
# A registered BFCL model key whose handler keeps dots in function names (underscore_to_dot
# False); ast_checker looks it up with "_" read as "/".
CHECKER_MODEL = "Qwen_Qwen3-8B-FC"
RECORDED = "The call was recorded (single-turn benchmark: calls are judged, not executed)."

_Language = importlib.import_module("bfcl_eval.constants.enums").Language


def _load_ast_checker() -> types.ModuleType:
    """BFCL's `ast_checker` module, loaded as a private copy. Its one import beyond the checker,
    `bfcl_eval.constants.model_config`, imports every API SDK BFCL supports (anthropic, cohere,
    mistralai, boto3, ...), which the project does not install; the checker only reads one flag
    from it (`underscore_to_dot`, for function names with dots), so the copy is loaded against a
    stand-in registry that answers False, the value of CHECKER_MODEL's real entry. Nothing is left
    in sys.modules."""
    name = "bfcl_eval.eval_checker.ast_eval.ast_checker"
    config = "bfcl_eval.constants.model_config"
    stub = types.ModuleType(config)
    stub.MODEL_CONFIG_MAPPING = collections.defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
    saved = sys.modules.get(config)
    sys.modules[config] = stub
    try:
        spec = importlib.util.find_spec(name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            sys.modules.pop(config, None)
        else:
            sys.modules[config] = saved
    return module


_ast = _load_ast_checker()


def check_calls(category: str, docs: list, calls: list[tuple[str, dict]] | None, possible_answer: Any,
                parse_error: str | None = None) -> dict:
    """The official verdict for `calls` (None or [] = no call): {"valid", "error_type", "error"}."""
    made = bool(calls)
    if category in NO_CALL:
        if made:
            return {"valid": False, "error_type": "irrelevance_error:decoder_success",
                    "error": ["Valid syntax. Successfully decode AST when it should not."]}
        return {"valid": True}
    if category == "live_relevance":
        if not made:
            return {"valid": False, "error_type": "relevance_error:decoder_failed",
                    "error": [f"Invalid syntax. Failed to decode AST when it should have. {parse_error or ''}".strip()]}
        return {"valid": True}
    if not made:
        return {"valid": False, "error_type": "ast_decoder:decoder_failed",
                "error": [f"Invalid syntax. Failed to decode AST. {parse_error or 'No function call.'}"]}
    output = [{name: args} for name, args in calls]
    try:
        result = _ast.ast_checker(copy.deepcopy(docs), output, copy.deepcopy(possible_answer), _Language.PYTHON,
                                  category, CHECKER_MODEL)
    except Exception as exc:  # the checker assumes well-formed input; anything else is a miss
        return {"valid": False, "error_type": "ast_checker:exception", "error": [f"{type(exc).__name__}: {exc}"]}
    return {"valid": bool(result.get("valid")), "error_type": result.get("error_type"),
            "error": result.get("error", [])}


def gold_calls(docs: list, possible_answer: list) -> list[tuple[str, dict]]:
    """One concrete answer from a possible_answer: every parameter's first listed value (inside
    dict values too, whose entries are option lists again). An optional parameter (a "" option)
    is left out when "" comes first or the function does not declare it; a required one takes
    its first non-empty option."""
    schemas = {d["name"]: d.get("parameters") or {} for d in docs}
    out = []
    for item in possible_answer:
        (name, params), = item.items()
        out.append((name, _pick_options(params, schemas.get(name) or {})))
    return out


def _pick_options(params: Mapping, schema: Mapping) -> dict:
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    required = set(schema.get("required") or [])
    args = {}
    for key, options in params.items():
        sub = props.get(key) if isinstance(props.get(key), Mapping) else {}
        if not isinstance(options, list):
            args[key] = _concrete(options, sub)
            continue
        values = [o for o in options if o != ""]
        if "" in options and key not in required and (options[0] == "" or (props and key not in props)):
            continue
        if not values:
            if key in required:
                args[key] = ""
            continue
        args[key] = _concrete(values[0], sub)
    return args


def _concrete(value: Any, schema: Mapping) -> Any:
    if isinstance(value, dict):
        return _pick_options(value, schema)
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), Mapping) else {}
        return [_concrete(v, items) for v in value]
    return copy.deepcopy(value)


def assistant_calls(messages: Sequence[Mapping], tools: Sequence[Mapping]) -> tuple[list[tuple[str, dict]] | None, str | None, bool]:
    """(calls of the first assistant message after the first user message, the parse error if
    its text could not be read, whether there was an assistant message at all)."""
    seen_user = False
    for m in messages:
        role = m.get("role")
        if role == "user":
            seen_user = True
        elif role == "assistant" and seen_user:
            if m.get("tool_calls"):
                calls, errors = [], []
                for c in m["tool_calls"]:
                    try:
                        calls.append(call_parts(c))
                    except CallError as exc:
                        errors.append(str(exc))
                if errors:
                    return None, "; ".join(errors), True
                return calls, None, True
            parsed = parse_tool_calls(m.get("content") or "", tools)
            if parsed.error:
                return None, parsed.error, True
            return [(c.name, dict(c.arguments)) for c in parsed.calls], None, True
    return None, None, False


class SingleTurnEpisode(Recorded):
    recorded = RECORDED


class SingleTurnBenchmark:
    """`get_benchmark("bfcl-single", allow_test=False, categories=None, splits_path=None)`;
    default categories: the five non-live ones."""

    name = NAME

    def __init__(self, allow_test: bool = False, categories: Sequence[str] | None = None,
                 splits_path: str | None = None):
        self.allow_test = allow_test
        self.categories = tuple(categories or SINGLE_TURN_CATEGORIES)
        for c in self.categories:
            if c not in CATEGORIES:
                raise UserError(f"unknown bfcl-single category {c!r} (one of {', '.join(CATEGORIES)})")
        self.splits_path = splits_path

    def _entry(self, tid: str) -> dict:
        if tid in UNSATISFIABLE:
            raise UserError(f"{tid} is excluded: its ground truth is unsatisfiable")
        entry = entries(category_of(tid)).get(tid)
        if entry is None:
            raise UserError(f"unknown bfcl-single task {tid!r}")
        return copy.deepcopy(entry)

    def _answer(self, tid: str) -> list | None:
        category = category_of(tid)
        return None if category in NO_ANSWER else copy.deepcopy(answers(category)[tid])

    def describe(self) -> dict:
        """What a run records about this benchmark."""
        return {"name": NAME, "categories": list(self.categories), "excluded": list(UNSATISFIABLE),
                "splits": splits.describe(self.splits_path), "checker": f"bfcl_eval ast_checker ({CHECKER_MODEL})"}

    def split_ids(self, category: str, split: str) -> list[str]:
        check_split(split, self.allow_test, tune=True)
        return splits.single_turn_split(category, split, self.splits_path)

    def tasks(self, split: str, limit: int | None = None, categories=None) -> list[Task]:
        """Tasks of `split`, category by category (the given order), ids in natural order;
        `limit` keeps a subset balanced over the categories."""
        cats = self.categories if categories is None else tuple(categories)
        groups = [self.split_ids(category, split) for category in cats]
        return [self.make_task(tid, split) for tid in balanced_subset(groups, limit)]

    def make_task(self, tid: str, split: str | None = None) -> Task:
        entry = self._entry(tid)
        category = category_of(tid)
        meta = {"env": {"benchmark": ENV_BENCHMARK, "task_id": tid, "variant": category},
                "max_steps_per_turn": 1, "held_out": category in LIVE_CATEGORIES}
        if split is not None:
            meta["split"] = split
        turn = [{"role": m["role"], "content": m["content"]} for m in entry["question"][0]]
        return Task(id=tid, benchmark=NAME, category=category, tools=[tool_schema(d) for d in entry["function"]],
                    turns=[turn], meta=meta)

    def episode(self, task: Task) -> SingleTurnEpisode:
        return SingleTurnEpisode(task)

    def verdict(self, tid: str, calls: list[tuple[str, dict]] | None, parse_error: str | None = None) -> dict:
        entry = self._entry(tid)
        return check_calls(category_of(tid), entry["function"], calls, self._answer(tid), parse_error)

    def score(self, task: Task, messages: list) -> Verdict:
        calls, parse_error, answered = assistant_calls(messages, task.tools)
        result = self.verdict(task.id, calls, parse_error)
        ok = bool(result["valid"])
        feedback = {
            "error_type": None if ok else result.get("error_type"),
            "checker_message": None if ok else short("; ".join(map(str, result.get("error") or []))),
            "calls": bounded([{"name": n, "arguments": a} for n, a in calls or []]),
            "parse_error": parse_error,
            "answered": answered,
        }
        return Verdict(success=ok, reward=1.0 if ok else 0.0, turn_pass=[ok], feedback=feedback)

    def gold(self, task_id: str) -> list[tuple[str, dict]]:
        """A concrete gold answer ([] for irrelevance; for live_relevance, which has no ground
        truth, [] as well)."""
        answer = self._answer(task_id)
        if answer is None:
            return []
        return gold_calls(self._entry(task_id)["function"], answer)

    def step_items(self, task: Task) -> list[StepItem]:
        gold = [{"name": n, "arguments": json.dumps(a, ensure_ascii=False)} for n, a in self.gold(task.id)]
        return [StepItem(task_id=task.id, index=0, messages=copy.deepcopy(task.turns[0]), tools=copy.deepcopy(task.tools),
                         gold=gold, meta={"env": dict(task.meta["env"]),
                                                   "gold_unknown": task.category == "live_relevance"})]

    def judge_step(self, item: StepItem, calls: list) -> bool:
        parsed = []
        for c in calls or []:
            try:
                parsed.append(call_parts(c))
            except CallError:
                return False
        return bool(self.verdict(item.task_id, parsed)["valid"])
