"""The default raw corpora, built from the train split of the BFCL benchmarks only.

    curateevo corpus build bfcl|bfcl-single --setting labeled|wild --out D [--seed N]

writes `D/corpus.jsonl` (canonical raw records, sorted by id), `D/build.json` (what was built
from what: benchmark, setting, seed, split, counts, the splits file's and the corpus's sha256)
and, for `wild`, `D/noise_labels.json` (the noise kind of every record; never in the records,
whose ids are opaque). The same arguments give byte-identical files. Only `tasks("train")` of
the benchmark is read: the builder never asks for a dev or test task.

Multi-turn (`bfcl`, source `bfcl_multi_turn`): one record per train task of every variant
(`base`, `miss_func`, `miss_param`, `long_context`; `--variants` narrows it).

- labeled: the ground-truth calls executed one per assistant message on the task's own fresh
  backends (benchmarks.bfcl.multi_turn), the real observations as tool messages, and a short
  assistant reply closing each user turn (for a turn with no gold call, a request for the missing
  detail, or a plain "cannot" when the function is missing). `tools` is every function the task
  offers at some point (for `miss_func` the revealed one too: a record has one tool list), and
  `meta.env` names the task so an environment can rebuild it. `outcome` is the official checker's
  verdict on the record (all pass).
- wild: the same tasks written with seeded, realistic noise, every call really executed:
  `wrong_call_recovery` (a wrong call - a mistyped value, a missing required argument - answered
  by its real error, then the right call), `malformed_arguments` (an unknown argument name or a
  wrong-typed value, its real error, then the right call), `redundant_read` (a read repeated),
  `off_task_chatter` (small talk in the assistant's messages), `abandoned` (stops part-way),
  `wrong_end_state` (a wrong call that goes through and is never corrected), plus `clean` ones
  and `exact_duplicate` / `near_duplicate` copies (a near duplicate re-says the closing replies).
  `outcome` is the official checker's verdict on each record as written: honest, whatever the
  noise did.

Single-turn (`bfcl-single`, source `bfcl_single_turn`): one record per train item of
`simple_python`, `multiple`, `parallel`, `parallel_multiple` and `irrelevance`.

- labeled: the user request and one assistant message with the gold calls (each parameter's first
  accepted value; nothing is executed in single-turn BFCL), or a short refusal for `irrelevance`;
  checked by the official `ast_checker`.
- wild: `wrong_type`, `wrong_value`, `missing_required`, `hallucinated_function` (a call to a
  function that is not offered), `unparseable_call`, `unwanted_call` (a call where none was
  wanted), `clean`, `exact_duplicate`, `near_duplicate`, each judged by the checker. A call the
  canonical format cannot hold as a tool call (an unknown function, text that is not a call)
  stays in the assistant's content, as a model's unparsed output would.
"""
from __future__ import annotations

import copy
import hashlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from benchmarks.base import Task, get_benchmark
from benchmarks.bfcl.common import OPENERS, closing_reply, is_error, tool_call_message
from evolver.errors import UserError
from sandbox.corpus import write_corpus
from sandbox.schemas import canonical_json, check_raw

SETTINGS = ("labeled", "wild")
BENCHMARKS = ("bfcl", "bfcl-single")
SPLIT = "train"
CORPUS_FILE, LABELS_FILE, BUILD_FILE = "corpus.jsonl", "noise_labels.json", "build.json"

# wild noise mix (weights of the kind of each task's record); a kind a task cannot take falls
# through to the next feasible one in this order, then to clean
MT_NOISE = {"clean": 30, "wrong_call_recovery": 14, "malformed_arguments": 12, "redundant_read": 10,
            "off_task_chatter": 10, "abandoned": 10, "wrong_end_state": 14}
ST_NOISE = {"clean": 40, "wrong_type": 12, "wrong_value": 12, "missing_required": 10,
            "hallucinated_function": 9, "unparseable_call": 9}
ST_IRRELEVANCE_NOISE = {"clean": 55, "unwanted_call": 30, "hallucinated_function": 15}
SECOND_RECORD = 0.3      # chance that a task gets a second, independently drawn record
EXACT_DUPLICATES = 0.04  # share of exact copies (new ids)
NEAR_DUPLICATES = 0.04   # share of near copies

CHATTER = (
    "By the way, I hope your day is going well!",
    "Fun fact: the first computer bug was an actual moth.",
    "Let me know if you'd like a joke while we wait.",
    "I love working on tasks like this one.",
    "Quick aside: remember to take a short break now and then.",
)
ASK_MISSING = ("I need one more detail before I can do that: could you tell me the missing value?",
               "Could you give me the missing information first? I cannot complete this without it.")
CANNOT = ("None of the available functions can do that.",
          "There is nothing I can do for that with the available tools.")
REFUSALS = ("None of the functions I have can answer that.",
            "I can't help with that using the available functions.",
            "That request is outside what my tools can do.")
_READ_PREFIXES = ("get_", "list_", "retrieve_", "view_", "search_", "display_", "check_", "ls", "pwd",
                  "cat", "find", "grep", "du", "wc", "tail", "echo", "diff")


def _rng(seed: int, *parts: Any) -> random.Random:
    return random.Random(":".join(map(str, (seed,) + parts)))


def _opaque_id(prefix: str, seed: int, key: str, taken: set[str]) -> str:
    rng = _rng(seed, "id", prefix, key)
    while True:
        rid = f"{prefix}/{rng.getrandbits(32):08x}"
        if rid not in taken:
            taken.add(rid)
            return rid


def _draw(rng: random.Random, weights: Mapping[str, int]) -> str:
    kinds = list(weights)
    return rng.choices(kinds, weights=[weights[k] for k in kinds])[0]


def _noisy_variant(builder, task, pick: random.Random, weights: Mapping[str, int], k: int) -> tuple[Any, dict]:
    """The k-th wild record of `task`: draw a noise kind from `weights`; when it does not apply to
    the task, fall back through the other kinds in order, clean last. Returns the builder's
    variant (a plan or a message list) and its label."""
    first = _draw(pick, weights)
    for kind in [first] + [x for x in weights if x not in (first, "clean")] + ["clean"]:
        made = builder.noisy(task, kind, _rng(builder.seed, kind, task.id, k))
        if made is not None:
            break
    variant, detail = made
    return variant, {"noise": kind, "task_id": task.id, **({"drawn": first} if kind != first else {}), **detail}


# ============================================================================================
# multi-turn


@dataclass
class _Step:
    calls: list[tuple[str, dict]]
    content: str | None = None


@dataclass
class _Plan:
    """What a trajectory does, per turn: its steps (one assistant message each) and how the
    turn is closed; `cut` = (turn, steps kept) stops the trajectory there, unclosed."""
    turns: list[list[_Step]]
    cut: tuple[int, int] | None = None
    chatter: dict[int, str] = field(default_factory=dict)  # turn -> small talk in its closing

    def copy(self) -> "_Plan":
        return copy.deepcopy(self)


class _MultiTurn:
    def __init__(self, bench, seed: int):
        self.bench = bench
        self.seed = seed

    def gold_plan(self, task: Task) -> _Plan:
        return _Plan([[_Step([(name, args)]) for name, args, _ in turn] for turn in self.bench.gold_turns(task)])

    # -- writing a plan by executing it

    def render(self, task: Task, plan: _Plan, rng: random.Random) -> list[dict]:
        ep = self.bench.episode(task)
        messages: list[dict] = []
        n = 0
        for t, steps in enumerate(plan.turns):
            turn = ep.next_turn()
            if turn is None:
                break
            messages.extend(turn)
            keep = steps if plan.cut is None or t < plan.cut[0] else steps[:plan.cut[1]]
            last = None
            for step in keep:
                ids = []
                for name, args in step.calls:
                    ids.append((f"call_{n}", name, args))
                    n += 1
                messages.append(tool_call_message(ids, step.content))
                observations = ep.execute([{"name": name, "arguments": json.dumps(args, ensure_ascii=False)}
                                           for _, name, args in ids])
                for (cid, name, _), obs in zip(ids, observations):
                    messages.append({"role": "tool", "tool_call_id": cid, "name": name, "content": obs})
                    last = (name, obs)
            if plan.cut is not None and t == plan.cut[0]:
                break
            messages.append({"role": "assistant", "content": self.closing(task, t, last, rng, plan.chatter.get(t))})
        return messages

    def closing(self, task: Task, t: int, last, rng: random.Random, chatter: str | None) -> str:
        opener = rng.choice(OPENERS)
        if last is None:
            text = rng.choice(ASK_MISSING if task.category == "miss_param" else CANNOT)
        else:
            text = closing_reply(last, opener)
        return f"{text} {chatter}" if chatter else text

    def record(self, rid: str, task: Task, messages: list[dict]) -> dict:
        verdict = self.bench.score(task, messages)
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        return {
            "id": rid,
            "source": "bfcl_multi_turn",
            "task": first_user,
            "tools": self.all_tools_cached(task),
            "messages": messages,
            "outcome": {"success": verdict.success, "reward": round(verdict.reward, 6)},
            "meta": {"env": dict(task.meta["env"]), "split": SPLIT},
        }

    def all_tools(self, task: Task) -> list[dict]:
        ep = self.bench.episode(task)
        tools = {t["function"]["name"]: t for t in task.tools}
        while ep.next_turn() is not None:
            for t in ep.offered_tools():
                tools.setdefault(t["function"]["name"], t)
        return list(tools.values())

    # -- noise, found by real execution

    def _state_after(self, task: Task, plan: _Plan, upto: tuple[int, int], extra: Sequence[tuple[str, dict]] = ()):
        """Observations of `extra`, executed after the gold steps before (turn, step), and
        whether they left the backends (state and RNG) as they were."""
        ep = self.bench.episode(task)
        for t, steps in enumerate(plan.turns):
            if t > upto[0]:
                break
            ep.next_turn()
            for j, step in enumerate(steps):
                if (t, j) >= upto:
                    break
                ep.execute([{"name": n, "arguments": json.dumps(a)} for n, a in step.calls])
        before = (ep.state(), ep.rng_states())
        obs = ep.execute([{"name": n, "arguments": json.dumps(a)} for n, a in extra])
        return obs, (ep.state(), ep.rng_states()) == before

    def _positions(self, plan: _Plan, rng: random.Random) -> list[tuple[int, int]]:
        pos = [(t, j) for t, steps in enumerate(plan.turns) for j in range(len(steps))]
        rng.shuffle(pos)
        return pos

    def _signature(self, task: Task, name: str) -> dict:
        for tool in self.all_tools_cached(task):
            if tool["function"]["name"] == name:
                return tool["function"].get("parameters") or {}
        return {}

    def all_tools_cached(self, task: Task) -> list[dict]:
        cache = self.__dict__.setdefault("_tools_cache", {})
        if task.id not in cache:
            cache[task.id] = self.all_tools(task)
        return cache[task.id]

    def _variants(self, task: Task, name: str, args: dict, rng: random.Random, kind: str) -> list[tuple[dict, str]]:
        params = self._signature(task, name)
        required = set(params.get("required") or [])
        props = params.get("properties") or {}
        out: list[tuple[dict, str]] = []
        for key, value in args.items():
            if kind in ("typo", "wrong"):
                if isinstance(value, str):
                    wrong = _typo(value)
                    if wrong and wrong != value:
                        out.append(({**args, key: wrong}, f"{name}: {key}={value!r} mistyped as {wrong!r}"))
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    bumped = value + 1 if isinstance(value, int) else round(value * 1.1 + 1, 2)
                    out.append(({**args, key: bumped}, f"{name}: {key}={value!r} changed to {bumped!r}"))
            if kind == "typo" and key in required:
                out.append(({k: v for k, v in args.items() if k != key}, f"{name}: required argument {key!r} left out"))
            if kind == "malformed":
                renamed = key + "_name" if not key.endswith("_name") else key[:-5]
                if renamed not in props:
                    out.append(({(renamed if k == key else k): v for k, v in args.items()},
                                f"{name}: argument {key!r} given as {renamed!r}"))
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out.append(({**args, key: str(value)}, f"{name}: {key} given as the string {str(value)!r}"))
                elif isinstance(value, str):
                    out.append(({**args, key: [value]}, f"{name}: {key} given as a list"))
        rng.shuffle(out)
        return out

    def noisy(self, task: Task, kind: str, rng: random.Random) -> tuple[_Plan, dict] | None:
        """A plan with one kind of noise and its label details, or None when the task cannot
        take that kind."""
        gold = self.gold_plan(task)
        if kind == "clean":
            return gold, {}
        positions = self._positions(gold, rng)
        if not positions:
            return None
        if kind in ("wrong_call_recovery", "malformed_arguments"):
            for t, j in positions:
                name, args = gold.turns[t][j].calls[0]
                for wrong, detail in self._variants(task, name, args, rng, "typo" if kind == "wrong_call_recovery" else "malformed"):
                    obs, unchanged = self._state_after(task, gold, (t, j), [(name, wrong)])
                    if is_error(obs[0]) and unchanged:
                        plan = gold.copy()
                        plan.turns[t].insert(j, _Step([(name, wrong)]))
                        return plan, {"turn": t, "step": j, "detail": detail}
            return None
        if kind == "redundant_read":
            positions.sort(key=lambda p: not gold.turns[p[0]][p[1]].calls[0][0].startswith(_READ_PREFIXES))
            for t, j in positions:
                name, args = gold.turns[t][j].calls[0]
                obs, unchanged = self._state_after(task, gold, (t, j), [(name, args), (name, args)])
                if unchanged and not is_error(obs[0]) and obs[0] == obs[1]:
                    plan = gold.copy()
                    plan.turns[t].insert(j + 1, _Step([(name, args)]))
                    return plan, {"turn": t, "step": j, "detail": f"{name} called twice"}
            return None
        if kind == "off_task_chatter":
            plan = gold.copy()
            t, j = positions[0]
            plan.turns[t][j].content = rng.choice(CHATTER)
            closing_turn = rng.randrange(len(plan.turns))
            plan.chatter[closing_turn] = rng.choice(CHATTER)
            return plan, {"turn": t, "step": j, "detail": "small talk in a call message and a closing reply"}
        if kind == "abandoned":
            last = positions and max(positions)
            pool = [p for p in positions if p != last and p[0] >= 1] or [p for p in positions if p != last]
            if not pool:
                return None
            t, j = sorted(pool)[rng.randrange(len(pool))]
            plan = gold.copy()
            plan.cut = (t, j + 1)
            return plan, {"turn": t, "step": j, "detail": f"stopped after call {j} of turn {t} of {len(gold.turns)}"}
        if kind == "wrong_end_state":
            for t, j in positions:
                name, args = gold.turns[t][j].calls[0]
                for wrong, detail in self._variants(task, name, args, rng, "wrong"):
                    obs, unchanged = self._state_after(task, gold, (t, j), [(name, wrong)])
                    if is_error(obs[0]) or unchanged:
                        continue
                    plan = gold.copy()
                    plan.turns[t][j] = _Step([(name, wrong)])
                    messages = self.render(task, plan, random.Random(0))
                    if self.bench.score(task, messages).success:
                        continue  # the checker does not mind this one: not a wrong end state
                    return plan, {"turn": t, "step": j, "detail": detail + " (went through, never corrected)"}
            return None
        raise ValueError(kind)

    # -- corpora

    def build(self, setting: str, variants: Sequence[str] | None, limit: int | None,
              progress: Callable[[str], None] | None) -> tuple[list[dict], dict]:
        tasks = self.bench.tasks(SPLIT, categories=variants)
        if limit is not None:
            tasks = tasks[:limit]
        records: dict[str, dict] = {}
        labels: dict[str, dict] = {}
        taken: set[str] = set()
        for i, task in enumerate(tasks):
            if progress and i % 50 == 0:
                progress(f"{i}/{len(tasks)} tasks")
            number = task.meta["scenario"]
            prefix = f"bfcl-mt-{task.category}-{number}"
            if setting == "labeled":
                rec = self.record(prefix, task, self.render(task, self.gold_plan(task), _rng(self.seed, "close", task.id)))
                if not rec["outcome"]["success"]:
                    raise RuntimeError(f"{task.id}: the labeled trajectory fails the checker")
                records[prefix] = rec
                continue
            pick = _rng(self.seed, "pick", task.id)
            count = 2 if pick.random() < SECOND_RECORD else 1
            for k in range(count):
                plan, label = _noisy_variant(self, task, pick, MT_NOISE, k)
                messages = self.render(task, plan, _rng(self.seed, "close", task.id, k))
                rid = _opaque_id(prefix, self.seed, f"{k}", taken)
                records[rid] = self.record(rid, task, messages)
                labels[rid] = label
        if setting == "wild":
            _add_duplicates(records, labels, self.seed, taken, self._near)
        return _finish(records), {rid: labels[rid] for rid in sorted(labels)}

    def _near(self, rec: dict, rng: random.Random) -> dict:
        """The same trajectory with its closing replies said differently."""
        out = copy.deepcopy(rec)
        for m in out["messages"]:
            if m["role"] == "assistant" and not m.get("tool_calls") and m.get("content"):
                text = m["content"]
                for opener in OPENERS:
                    if text.startswith(opener + " "):
                        text = rng.choice([o for o in OPENERS if o != opener]) + text[len(opener):]
                        break
                else:
                    text = text + " " + rng.choice(("Anything else?", "Let me know what is next.", "Happy to help further."))
                m["content"] = text
        return out


def _typo(value: str) -> str | None:
    """A near miss of a string: the last digit bumped, else two adjacent letters swapped."""
    for k in range(len(value) - 1, -1, -1):
        if value[k] in "0123456789":
            return value[:k] + str((int(value[k]) + 1) % 10) + value[k + 1:]
    letters = [k for k in range(len(value) - 1) if value[k].isalpha() and value[k + 1].isalpha()
               and value[k] != value[k + 1]]
    if not letters:
        return value + "x" if value else None
    k = letters[-1]
    return value[:k] + value[k + 1] + value[k] + value[k + 2:]


def _add_duplicates(records: dict, labels: dict, seed: int, taken: set[str], near: Callable) -> None:
    rng = _rng(seed, "duplicates")
    ids = sorted(records)
    n_exact = max(1, round(EXACT_DUPLICATES * len(ids))) if ids else 0
    n_near = max(1, round(NEAR_DUPLICATES * len(ids))) if ids else 0
    picks = rng.sample(ids, min(len(ids), n_exact + n_near))
    for k, rid in enumerate(picks):
        exact = k < n_exact
        prefix = rid.split("/")[0]
        new = _opaque_id(prefix, seed, f"dup{k}", taken)
        copy_ = copy.deepcopy(records[rid]) if exact else near(records[rid], _rng(seed, "near", rid))
        copy_["id"] = new
        records[new] = copy_
        labels[new] = {"noise": "exact_duplicate" if exact else "near_duplicate",
                       "task_id": labels[rid]["task_id"], "duplicate_of": rid, "of_noise": labels[rid]["noise"]}


def _finish(records: dict) -> list[dict]:
    out = [records[rid] for rid in sorted(records)]
    for rec in out:
        error = check_raw(rec)
        if error:
            raise RuntimeError(f"{rec['id']}: {error}")
    return out


# ============================================================================================
# single-turn


_FAKE = {"string": "example", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}


class _SingleTurn:
    def __init__(self, bench, seed: int):
        self.bench = bench
        self.seed = seed

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
        if task.category in ("irrelevance", "live_irrelevance"):
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
                    wrong = _typo(value)
                    if wrong is None or wrong == value:
                        continue
                else:
                    continue
            calls = list(gold)
            calls[i] = (name, {**args, key: wrong})
            return self.calls_message(calls), {"detail": f"{name}: {key}={value!r} given as {wrong!r}"}
        return None

    def build(self, setting: str, variants, limit: int | None, progress) -> tuple[list[dict], dict]:
        tasks = self.bench.tasks(SPLIT, categories=variants)
        if limit is not None:
            tasks = tasks[:limit]
        records: dict[str, dict] = {}
        labels: dict[str, dict] = {}
        taken: set[str] = set()
        skipped: list[str] = []
        for i, task in enumerate(tasks):
            if progress and i % 200 == 0:
                progress(f"{i}/{len(tasks)} items")
            prefix = f"bfcl-st-{task.id}"
            if setting == "labeled":
                rec = self.record(prefix, task, self.gold_message(task, _rng(self.seed, "reply", task.id)))
                if not rec["outcome"]["success"]:
                    skipped.append(task.id)  # a gold answer the checker does not accept: left out
                    continue
                records[prefix] = rec
                continue
            pick = _rng(self.seed, "pick", task.id)
            weights = ST_IRRELEVANCE_NOISE if task.category == "irrelevance" else ST_NOISE
            count = 2 if pick.random() < SECOND_RECORD else 1
            for k in range(count):
                message, label = _noisy_variant(self, task, pick, weights, k)
                rid = _opaque_id(prefix, self.seed, f"{k}", taken)
                records[rid] = self.record(rid, task, message)
                labels[rid] = label
        if setting == "wild":
            _add_duplicates(records, labels, self.seed, taken, self._near)
        self.skipped = skipped
        return _finish(records), {rid: labels[rid] for rid in sorted(labels)}

    def _near(self, rec: dict, rng: random.Random) -> dict:
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


# ============================================================================================
# entry points


def build(benchmark: str, setting: str, seed: int = 0, *, variants: Sequence[str] | None = None,
          limit: int | None = None, progress: Callable[[str], None] | None = None,
          splits_path: str | None = None) -> tuple[list[dict], dict, dict]:
    """(records sorted by id, noise labels by id ({} for labeled), build info)."""
    if setting not in SETTINGS:
        raise UserError(f"unknown setting {setting!r} (one of {', '.join(SETTINGS)})")
    if benchmark not in BENCHMARKS:
        raise UserError(f"unknown corpus benchmark {benchmark!r} (one of {', '.join(BENCHMARKS)})")
    bench = get_benchmark(benchmark, splits_path=splits_path)
    maker = _MultiTurn(bench, seed) if benchmark == "bfcl" else _SingleTurn(bench, seed)
    records, labels = maker.build(setting, variants, limit, progress)
    info = {
        "benchmark": benchmark, "setting": setting, "seed": seed, "split": SPLIT,
        "variants": list(variants) if variants else None, "limit": limit,
        "records": len(records),
        "tasks": len({r["meta"]["env"]["task_id"] for r in records}),
        "success": sum(1 for r in records if r["outcome"]["success"]),
        "by_variant": dict(sorted(Counter(r["meta"]["env"]["variant"] for r in records).items())),
        "splits_sha256": _sha256_file(Path(splits_path) if splits_path else _splits_file()),
        "bfcl_eval": _bfcl_version(),
    }
    if labels:
        info["noise"] = dict(sorted(Counter(v["noise"] for v in labels.values()).items()))
    skipped = getattr(maker, "skipped", None)
    if skipped:
        info["skipped_unaccepted_gold"] = skipped
    return records, labels, info


def _splits_file() -> Path:
    from benchmarks.bfcl.splits import SPLITS_PATH
    return SPLITS_PATH


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _bfcl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("bfcl-eval")
    except PackageNotFoundError:
        return "unknown"


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8", newline="\n")
    tmp.replace(path)


def write(out: Path, benchmark: str, setting: str, seed: int = 0, **options) -> dict:
    """Build and write the corpus into directory `out`; returns the build info (plus wall time
    and bytes, which are not written)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    records, labels, info = build(benchmark, setting, seed, **options)
    corpus = out / CORPUS_FILE
    write_corpus(records, corpus)
    info["corpus_sha256"] = _sha256_file(corpus)
    if setting == "wild":
        _atomic_text(out / LABELS_FILE, json.dumps({"benchmark": benchmark, "seed": seed, "counts": info["noise"],
                                                    "labels": labels}, sort_keys=True, ensure_ascii=False, indent=1) + "\n")
    else:
        (out / LABELS_FILE).unlink(missing_ok=True)
    _atomic_text(out / BUILD_FILE, json.dumps(info, sort_keys=True, ensure_ascii=False, indent=1) + "\n")
    return {**info, "seconds": round(time.perf_counter() - started, 2), "bytes": corpus.stat().st_size}


def render(records: Sequence[Mapping]) -> bytes:
    return b"".join(canonical_json(r).encode("utf-8") + b"\n" for r in records)
