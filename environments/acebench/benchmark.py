"""ACEBench (English) as a benchmark ("acebench"): its normal and special items, one answer each,
judged by the rules of the official checker (environments/acebench/checker.py), and its agent
multi-step items where environments/acebench/agent.py can execute them.

A task is one item as ACEBench's own inference asks it: the system prompt of its kind (normal,
preference, special; the item's `time` or `profile` filled in, the API specifications given as the
offered tools) and one user message "Conversation history 1..t:" with the item's question. The
answer is the first assistant message: its tool calls rendered in ACEBench's call syntax
(`checker.calls_to_text`), or its text when it made none (a special item's right answer is text,
e.g. "Missing necessary parameters (...)"), scored by `checker.check`.

Splits are drawn by item, never crossing: an item is dev when sha256(id) mod 5 is 0 (about a
fifth), test otherwise; ACEBench has no train split (it is never curated from). The test split is
the same whether a run evolved on ACEBench's dev or elsewhere, so every table reads one set. The agent
multi-turn items need an LLM playing the user (`user`, an environments.user_sim.UserEndpoint): with one
they are offered (by default with the rest) and run as conversations (environments/acebench/
conversation.py, scored by multiturn.py); without one, asking for them is a UserError naming the flags,
and `describe()` lists them as not run, never scored 0.
"""
from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

from base.errors import UserError
from base.benchmark import StepItem, Task, Verdict, balanced_subset, check_split
from environments.episodes import Recorded
from environments.bfcl.backends import CallError, tool_schema
from environments.bfcl.common import bounded, call_parts, short
from environments.user_sim import FLAGS as USER_FLAGS
from chat_format.chat_format import parse_tool_calls

NAME = "acebench"
ENV_BENCHMARK = "acebench"
RECORDED = "The call was recorded (ACEBench judges the calls of one answer, it does not execute them)."
DEV_MODULUS = 5


def split_of(item_id: str) -> str:
    """dev or test, by the item's id alone (so the split never moves when items are added)."""
    return "dev" if int(hashlib.sha256(item_id.encode()).hexdigest(), 16) % DEV_MODULUS == 0 else "test"


def scored_categories() -> tuple[str, ...]:
    """The categories scored without an LLM user: normal, special, and agent multi-step when its
    scenarios run here."""
    from environments.acebench import data

    return tuple(c for c in data.CATEGORIES if c not in data.NEEDS_USER and (not c.startswith("agent") or _agent()))


def _agent():
    try:
        from environments.acebench import agent
    except ImportError:
        return None
    return agent


def answer_text(messages: Sequence[Mapping], tools: Sequence[Mapping]) -> tuple[str | None, list, bool]:
    """(the answer as ACEBench's checker reads it, the calls made, whether there was an answer):
    the first assistant message after the first user message."""
    from environments.acebench.checker import calls_to_text

    seen_user = False
    for m in messages:
        if m.get("role") == "user":
            seen_user = True
        elif m.get("role") == "assistant" and seen_user:
            calls = []
            for c in m.get("tool_calls") or []:
                try:
                    calls.append(call_parts(c))
                except CallError:
                    return m.get("content") or "", [], True
            if not calls:
                parsed = parse_tool_calls(m.get("content") or "", tools)
                if not parsed.error and parsed.calls:
                    calls = [(c.name, dict(c.arguments)) for c in parsed.calls]
            return (calls_to_text(calls) if calls else (m.get("content") or "")), calls, True
    return None, [], False


class Episode(Recorded):
    """One answer: the item's prompt, then calls recorded (not executed) and the task is over."""

    recorded = RECORDED


class ACEBenchBenchmark:
    """`get_benchmark("acebench", allow_test=False, categories=None, user=None)`."""

    name = NAME

    def __init__(self, allow_test: bool = False, categories: Sequence[str] | None = None, user=None):
        from environments.acebench import data

        self.allow_test, self.user = allow_test, user
        known = scored_categories()
        if user is not None:
            known = tuple(c for c in data.CATEGORIES if c in known or c in data.NEEDS_USER)
        self.categories = tuple(categories or known)
        for c in self.categories:
            if c in data.NEEDS_USER and user is None:
                raise UserError(f"ACEBench {c} needs an LLM user simulator: give {USER_FLAGS}")
            if c not in known:
                raise UserError(f"unknown ACEBench category {c!r} (one of {', '.join(known)})")

    def describe(self) -> dict:
        from environments.acebench import data

        doc = {"name": NAME, "categories": list(self.categories), "source": data.source()["commit"],
               "not_run": {c: "needs an LLM user" for c in data.NEEDS_USER if self.user is None},
               "split": f"by item: dev when sha256(id) % {DEV_MODULUS} == 0, else test"}
        if self.user is not None:
            doc["user"] = self.user.record()
        return doc

    def split_ids(self, category: str, split: str) -> list[str]:
        from environments.acebench import data

        check_split(split, self.allow_test)
        ids = sorted(data.items(category), key=_natural)
        return [i for i in ids if split_of(i) == split]

    def tasks(self, split: str, limit: int | None = None, categories=None) -> list[Task]:
        cats = self.categories if categories is None else tuple(categories)
        groups = [self.split_ids(c, split) for c in cats]
        return [self.make_task(tid, split) for tid in balanced_subset(groups, limit)]

    def make_task(self, tid: str, split: str | None = None) -> Task:
        from environments.acebench import data, prompts

        category = data.category_of(tid)
        item = data.items(category)[tid]
        tools = [tool_schema(d) for d in item["function"]]
        if category in data.NEEDS_USER:
            from environments.acebench import multiturn

            return multiturn.make_task(tid, item, tools, split, self.user)
        if category.startswith("agent"):
            return _agent().make_task(tid, item, tools, split)
        meta = {"env": {"benchmark": ENV_BENCHMARK, "task_id": tid, "variant": category}, "max_steps_per_turn": 1}
        if split is not None:
            meta["split"] = split
        turn = [{"role": "system", "content": prompts.system_prompt(category, item)},
                {"role": "user", "content": prompts.user_prompt(item)}]
        return Task(id=tid, benchmark=NAME, category=category, tools=tools, turns=[turn], meta=meta)

    def episode(self, task: Task):
        from environments.acebench import data

        if task.category in data.NEEDS_USER:
            from environments.acebench.conversation import Conversation

            if self.user is None:
                raise UserError(f"ACEBench {task.category} needs an LLM user simulator: give {USER_FLAGS}")
            return Conversation(task, self.user)
        if task.category.startswith("agent"):
            return _agent().episode(task)
        return Episode(task)

    def score(self, task: Task, messages: list) -> Verdict:
        from environments.acebench import checker, data

        if task.category in data.NEEDS_USER:
            from environments.acebench import multiturn

            return multiturn.score(task, messages)
        if task.category.startswith("agent"):
            return _agent().score(task, messages)
        text, calls, answered = answer_text(messages, task.tools)
        result = checker.check(task.category, task.id, text or "")
        ok = bool(result["valid"])
        feedback = {"error_type": None if ok else f"acebench:{task.category}:{result.get('error_type') or 'invalid'}",
                    "checker_message": None if ok else short("; ".join(map(str, result.get("error") or []))),
                    "calls": bounded([{"name": n, "arguments": a} for n, a in calls]),
                    "answer": short(text or ""), "answered": answered}
        return Verdict(success=ok, reward=1.0 if ok else 0.0, turn_pass=[ok], feedback=feedback)

    def step_items(self, task: Task) -> list[StepItem]:
        return []


def _natural(tid: str) -> tuple:
    """Ids in natural order: "x_2" before "x_10" (numeric parts compare as numbers)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in tid.split("_"))
