"""Policies with fixed behaviour: sanity checks of a benchmark and of the runner.

- `SilentPolicy`: answers every turn with the same text (default: nothing); no call is made,
  so every task that needs one fails.
- `OraclePolicy`: makes the gold calls, all of a turn's in one assistant message, then closes the
  turn with a short reply.
- `ScriptedPolicy`: any function `(messages, tools) -> text`.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

from chat_format import chat_format as cf

CLOSING_REPLY = "Done."


class ScriptedPolicy:
    name = "scripted"

    def __init__(self, fn: Callable[[list, list], str], label: str = "scripted"):
        self.fn, self.label = fn, label
        self.calls = 0

    def describe(self) -> dict:
        return {"backend": self.name, "label": self.label}

    def generate(self, prompts: Sequence[tuple], n: int = 1, temperature: float = 0.0,
                 seed: int | None = None) -> list[list[str]]:
        self.calls += 1
        return [[self.fn(list(m), list(t or [])) for _ in range(n)] for m, t in prompts]


class SilentPolicy(ScriptedPolicy):
    name = "silent"

    def __init__(self, text: str = ""):
        super().__init__(lambda messages, tools: text, label=f"silent:{text!r}")


def first_user_text(messages: Sequence[Mapping]) -> str:
    return next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")


def conversation_key(messages: Sequence[Mapping], tools: Sequence[Mapping]) -> tuple:
    """What identifies a point of a task for the oracle: every user message and tool result so
    far and the names of the functions on offer (variants of one BFCL scenario share their
    messages; a miss_func turn differs from its base twin by what is offered, a long_context one
    by what its tools return)."""
    seen = tuple((m.get("role"), m.get("content") or "") for m in messages if m.get("role") in ("user", "tool"))
    return seen, tuple(sorted(t.get("function", t).get("name", "") for t in tools or []))


def _normal_calls(calls: Sequence[Mapping]) -> list[dict]:
    return [{"name": c["name"], "arguments": cf.canonical_arguments(c.get("arguments", {}))} for c in calls]


class OraclePolicy(ScriptedPolicy):
    """Makes the gold calls. `table` maps `conversation_key` at the start of a turn to the turn's
    gold calls `[{"name", "arguments"}]`; build it with `for_tasks`. At the start of a turn the
    oracle makes all of the turn's calls in one assistant message (Hermes `<tool_call>` blocks
    rendered by the chat format); once they are answered it closes the turn with a short reply.
    A turn without gold calls gets the reply at once."""

    name = "oracle"
    AMBIGUOUS = "ambiguous"

    def __init__(self, table: Mapping[tuple, Sequence[Mapping] | str], reply: str = CLOSING_REPLY):
        self.table = dict(table)
        self.reply = reply
        super().__init__(self._answer, label="oracle")

    @classmethod
    def for_tasks(cls, benchmark, tasks: Sequence, gold: Callable, reply: str = CLOSING_REPLY) -> "OraclePolicy":
        """`gold(task)` → per user turn, the gold calls `[{"name", "arguments"}]`. The table is
        made by walking an episode of each task with the gold calls, as the run will."""
        table: dict[tuple, list | str] = {}
        for task in tasks:
            episode, messages = benchmark.episode(task), []
            for calls in gold(task):
                turn = episode.next_turn()
                if turn is None:
                    break
                messages.extend(dict(m) for m in turn)
                key = conversation_key(messages, episode.offered_tools())
                calls = _normal_calls(calls)
                table[key] = calls if table.get(key, calls) == calls else cls.AMBIGUOUS
                if calls:  # what the oracle's calls will return in the run
                    messages.extend({"role": "tool", "content": o} for o in episode.execute(calls))
        return cls(table, reply)

    def _answer(self, messages: list, tools: list) -> str:
        if not messages or messages[-1].get("role") != "user":
            return self.reply  # the turn's calls were made and answered
        calls = self.table.get(conversation_key(messages, tools))
        if calls is None or calls == self.AMBIGUOUS:
            raise KeyError(f"the oracle has {'ambiguous' if calls else 'no'} gold for this point of a task")
        if not calls:
            return self.reply
        return cf.render_assistant({"content": "", "tool_calls": cf.to_openai_tool_calls(calls)})
