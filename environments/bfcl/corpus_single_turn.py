"""The single-turn BFCL corpus builder (`bfcl-single`, source `bfcl_single_turn`): the user request
and one assistant message with the gold calls or a refusal, or a seeded wrong answer, each judged
by the official `ast_checker` (environments/bfcl/corpus_builder.py describes the kinds)."""
from __future__ import annotations

import copy
import json
import random
from typing import Mapping, Sequence

from base.benchmark import Task
from environments.bfcl.common import tool_call_message
from environments.bfcl.corpus_noise import SPLIT, seeded, typo
from environments.bfcl.single_turn_data import NO_CALL

ST_NOISE = {"clean": 40, "wrong_type": 12, "wrong_value": 12, "missing_required": 10,
            "hallucinated_function": 9, "unparseable_call": 9}
ST_IRRELEVANCE_NOISE = {"clean": 55, "unwanted_call": 30, "hallucinated_function": 15}
REFUSALS = ("None of the functions I have can answer that.",
            "I can't help with that using the available functions.",
            "That request is outside what my tools can do.")
_FAKE = {"string": "example", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}


class SingleTurnBuilder:
    def __init__(self, bench, seed: int):
        self.bench = bench
        self.seed = seed
        self.skipped: list[str] = []   # tasks whose gold answer the checker does not accept: left out

    def record(self, rid: str, task: Task, assistant: dict) -> dict:
        messages = copy.deepcopy(task.turns[0]) + [assistant]
        verdict = self.bench.score(task, messages)
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        return {
            "id": rid, "source": "bfcl_single_turn", "task": first_user, "tools": copy.deepcopy(task.tools),
            "messages": messages, "outcome": {"success": verdict.success, "reward": verdict.reward},
            "meta": {"env": dict(task.meta["env"]), "split": SPLIT},
        }

    @staticmethod
    def calls_message(calls: Sequence[tuple[str, dict]], content: str | None = None) -> dict:
        return tool_call_message([(f"call_{i}", n, a) for i, (n, a) in enumerate(calls)], content)

    def gold_message(self, task: Task, rng: random.Random) -> dict:
        gold = self.bench.gold(task.id)
        if task.category in NO_CALL:
            return {"role": "assistant", "content": rng.choice(REFUSALS)}
        return self.calls_message(gold)

    def noisy(self, task: Task, kind: str, rng: random.Random) -> tuple[dict, dict] | None:
        gold = self.bench.gold(task.id)
        props = {t["function"]["name"]: (t["function"].get("parameters") or {}) for t in task.tools}
        if kind == "clean":
            return self.gold_message(task, rng), {}
        if kind == "unwanted_call":
            tool = rng.choice(task.tools)["function"]
            params = tool.get("parameters") or {}
            args = {k: copy.deepcopy(_FAKE.get((params.get("properties") or {}).get(k, {}).get("type"), "example"))
                    for k in params.get("required") or [] if k in (params.get("properties") or {})}
            return self.calls_message([(tool["name"], args)]), {"detail": f"called {tool['name']} when no call was wanted"}
        if kind == "hallucinated_function":
            names = {t["function"]["name"] for t in task.tools}
            base = gold[0] if gold else (task.tools[0]["function"]["name"], {})
            name = _invent_name(base[0], names, rng)
            text = '<tool_call>{"name": ' + json.dumps(name) + ', "arguments": ' + json.dumps(base[1], ensure_ascii=False) + "}</tool_call>"
            return {"role": "assistant", "content": text}, {"detail": f"called {name!r}, which is not offered"}
        if not gold:
            return None
        i = rng.randrange(len(gold))
        name, args = gold[i]
        params = props.get(name, {})
        required = [k for k in params.get("required") or [] if k in args]
        if kind == "unparseable_call":
            whole = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
            cut = max(1, len(whole) - rng.randint(2, min(12, len(whole) - 1)))
            text = "<tool_call>" + whole[:cut] + "</tool_call>"
            return {"role": "assistant", "content": text}, {"detail": "the call's JSON is cut off"}
        if kind == "missing_required":
            if not required:
                return None
            key = rng.choice(required)
            calls = list(gold)
            calls[i] = (name, {k: v for k, v in args.items() if k != key})
            return self.calls_message(calls), {"detail": f"{name}: required argument {key!r} left out"}
        keys = sorted(args)
        rng.shuffle(keys)
        for key in keys:
            value = args[key]
            if kind == "wrong_type":
                if isinstance(value, bool):
                    wrong = str(value).lower()
                elif isinstance(value, (int, float)):
                    wrong = str(value)
                elif isinstance(value, str) and _number(value) is not None:
                    wrong = _number(value)
                elif isinstance(value, list):
                    wrong = ", ".join(map(str, value))
                else:
                    continue
            else:  # wrong_value
                if isinstance(value, bool):
                    wrong = not value
                elif isinstance(value, int):
                    wrong = value + rng.choice((1, 2, 10))
                elif isinstance(value, float):
                    wrong = round(value * 2 + 1, 3)
                elif isinstance(value, str) and value:
                    wrong = typo(value)
                    if wrong is None or wrong == value:
                        continue
                else:
                    continue
            calls = list(gold)
            calls[i] = (name, {**args, key: wrong})
            return self.calls_message(calls), {"detail": f"{name}: {key}={value!r} given as {wrong!r}"}
        return None

    # -- corpora (environments.bfcl.corpus_noise.Builder)

    progress_every, unit = 200, "items"

    def prefix(self, task: Task) -> str:
        return f"bfcl-st-{task.id}"

    def labeled(self, rid: str, task: Task) -> dict | None:
        rec = self.record(rid, task, self.gold_message(task, seeded(self.seed, "reply", task.id)))
        if not rec["outcome"]["success"]:
            self.skipped.append(task.id)
            return None
        return rec

    def weights(self, task: Task) -> Mapping[str, int]:
        return ST_IRRELEVANCE_NOISE if task.category == "irrelevance" else ST_NOISE

    def wild_record(self, rid: str, task: Task, message: dict, k: int) -> dict:
        return self.record(rid, task, message)

    def near(self, rec: dict, rng: random.Random) -> dict:
        """The same answer with its argument object written in another key order, or a
        refusal said differently."""
        out = copy.deepcopy(rec)
        m = out["messages"][-1]
        if m.get("tool_calls"):
            for c in m["tool_calls"]:
                args = json.loads(c["function"]["arguments"])
                if isinstance(args, dict) and len(args) > 1:
                    c["function"]["arguments"] = json.dumps(dict(reversed(list(args.items()))), ensure_ascii=False)
                else:
                    c["function"]["arguments"] = json.dumps(args, ensure_ascii=False, indent=1)
        else:
            m["content"] = (m.get("content") or "") + " " + rng.choice(("Sorry!", "Anything else?"))
        return out


def _number(text: str) -> int | float | None:
    for kind in (int, float):
        try:
            value = kind(text.strip())
        except ValueError:
            continue
        return value if value == value and abs(value) != float("inf") else None
    return None


def _invent_name(name: str, taken: set[str], rng: random.Random) -> str:
    head, dot, tail = name.rpartition(".")
    stem = tail or name
    for candidate in (f"{stem}_v2", f"get_{stem}", f"{stem}_tool", f"calc_{stem}", f"{stem}_helper"):
        full = f"{head}{dot}{candidate}" if dot else candidate
        if full not in taken:
            return full
    return f"{name}_{rng.getrandbits(16):04x}"

