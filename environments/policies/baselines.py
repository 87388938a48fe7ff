"""Baseline policies: what a metric gives a policy that learnt nothing about *when* to call.

- `MostCommonToolPolicy`: at every step calls the offered tool that the training records call
  most often, with the arguments they give it most often — the "always call the most common
  tool" floor a next-call score (call_f1) must be read against (docs/results.md: Your own corpus).
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Mapping, Sequence

from environments.policies.scripted import ScriptedPolicy
from chat_format import chat_format as cf


def _arguments(raw) -> dict | None:
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class MostCommonToolPolicy(ScriptedPolicy):
    """Always one call: the offered tool called most often in `records` (ties: by name; a tool
    never called there ranks below the others), with its most common arguments there ({} when
    it was never called)."""

    name = "most-common-tool"

    def __init__(self, counts: Mapping[str, int], arguments: Mapping[str, dict]):
        self.counts, self.arguments = dict(counts), dict(arguments)
        super().__init__(self._answer, label="most-common-tool")

    @classmethod
    def from_records(cls, records: Sequence[Mapping]) -> "MostCommonToolPolicy":
        counts: Counter = Counter()
        seen: dict[str, Counter] = defaultdict(Counter)
        for record in records:
            for m in record.get("messages") or ():
                for call in m.get("tool_calls") or () if m.get("role") == "assistant" else ():
                    fn = call.get("function", call)
                    args = _arguments(fn.get("arguments", {}))
                    counts[fn["name"]] += 1
                    if args is not None:
                        seen[fn["name"]][json.dumps(args, sort_keys=True, ensure_ascii=False)] += 1
        # most common arguments, ties broken by their text so the choice is deterministic
        arguments = {name: json.loads(min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0]) for name, c in seen.items()}
        return cls(counts, arguments)

    def describe(self) -> dict:
        return {"backend": self.name, "label": self.label, "tools_seen": len(self.counts)}

    def _answer(self, messages: list, tools: list) -> str:
        names = [t.get("function", t).get("name") for t in tools]
        if not names:
            return "I cannot call a tool here."
        name = min(names, key=lambda n: (-self.counts.get(n, 0), str(n)))
        call = {"name": name, "arguments": self.arguments.get(name, {})}
        return cf.render_assistant({"content": "", "tool_calls": cf.to_openai_tool_calls([call])})
