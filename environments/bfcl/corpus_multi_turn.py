"""The multi-turn BFCL corpus builder (`bfcl`, source `bfcl_multi_turn`): a trajectory is a plan
of gold calls per turn, written by executing it on the task's own fresh backends; wild noise is
found by real execution (environments/bfcl/corpus_builder.py describes the kinds)."""
from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from base.benchmark import Task
from environments.bfcl.common import OPENERS, closing_reply, is_error, tool_call_message
from environments.bfcl.corpus_noise import SPLIT, seeded, typo

# wild noise mix (weights of the kind of each task's record); a kind a task cannot take falls
# through to the next feasible one in this order, then to clean
MT_NOISE = {"clean": 30, "wrong_call_recovery": 14, "malformed_arguments": 12, "redundant_read": 10,
            "off_task_chatter": 10, "abandoned": 10, "wrong_end_state": 14}

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
_READ_PREFIXES = ("get_", "list_", "retrieve_", "view_", "search_", "display_", "check_", "ls", "pwd",
                  "cat", "find", "grep", "du", "wc", "tail", "echo", "diff")


@dataclass
class Step:
    calls: list[tuple[str, dict]]
    content: str | None = None


@dataclass
class Plan:
    """What a trajectory does, per turn: its steps (one assistant message each) and how the
    turn is closed; `cut` = (turn, steps kept) stops the trajectory there, unclosed."""
    turns: list[list[Step]]
    cut: tuple[int, int] | None = None
    chatter: dict[int, str] = field(default_factory=dict)  # turn -> small talk in its closing

    def copy(self) -> "Plan":
        return copy.deepcopy(self)


class MultiTurnBuilder:
    def __init__(self, bench, seed: int):
        self.bench = bench
        self.seed = seed

    def gold_plan(self, task: Task) -> Plan:
        return Plan([[Step([(name, args)]) for name, args, _ in turn] for turn in self.bench.gold_turns(task)])

    # -- writing a plan by executing it

    def render(self, task: Task, plan: Plan, rng: random.Random) -> list[dict]:
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

    def _state_after(self, task: Task, plan: Plan, upto: tuple[int, int], extra: Sequence[tuple[str, dict]] = ()):
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

    def _positions(self, plan: Plan, rng: random.Random) -> list[tuple[int, int]]:
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
                    wrong = typo(value)
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

    def noisy(self, task: Task, kind: str, rng: random.Random) -> tuple[Plan, dict] | None:
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
                        plan.turns[t].insert(j, Step([(name, wrong)]))
                        return plan, {"turn": t, "step": j, "detail": detail}
            return None
        if kind == "redundant_read":
            positions.sort(key=lambda p: not gold.turns[p[0]][p[1]].calls[0][0].startswith(_READ_PREFIXES))
            for t, j in positions:
                name, args = gold.turns[t][j].calls[0]
                obs, unchanged = self._state_after(task, gold, (t, j), [(name, args), (name, args)])
                if unchanged and not is_error(obs[0]) and obs[0] == obs[1]:
                    plan = gold.copy()
                    plan.turns[t].insert(j + 1, Step([(name, args)]))
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
                    plan.turns[t][j] = Step([(name, wrong)])
                    messages = self.render(task, plan, random.Random(0))
                    if self.bench.score(task, messages).success:
                        continue  # the checker does not mind this one: not a wrong end state
                    return plan, {"turn": t, "step": j, "detail": detail + " (went through, never corrected)"}
            return None
        raise ValueError(kind)

    # -- corpora (environments.bfcl.corpus_noise.Builder)

    progress_every, unit = 50, "tasks"

    def prefix(self, task: Task) -> str:
        return f"bfcl-mt-{task.category}-{task.meta['scenario']}"

    def labeled(self, rid: str, task: Task) -> dict:
        rec = self.record(rid, task, self.render(task, self.gold_plan(task), seeded(self.seed, "close", task.id)))
        if not rec["outcome"]["success"]:
            raise RuntimeError(f"{task.id}: the labeled trajectory fails the checker")
        return rec

    def weights(self, task: Task) -> Mapping[str, int]:
        return MT_NOISE

    def wild_record(self, rid: str, task: Task, plan: Plan, k: int) -> dict:
        return self.record(rid, task, self.render(task, plan, seeded(self.seed, "close", task.id, k)))

    def near(self, rec: dict, rng: random.Random) -> dict:
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
