"""ACEBench's English agent_multi_turn items, executed and scored here by the rules of the official code
(github ACEBench/ACEBench e6db74b, MIT: `model_inference/multi_turn/*` — the loop of
`common_inference.py` / `apimodel_inference.py` multi_turn_inference, APIModel_agent.py,
execution_role.py, multi_turn_utils.py — and `eval_main.py` agent_eval and agent_eval_process),
reimplemented, not copied. The conversation with the simulated user is conversation.py.

The task: ACEBench's multi-turn agent system prompt, followed by its travel rules when the item involves
Travel and its phone rules when it involves BaseApi (data/prompts_multi_turn_en.json); the item's
functions are the offered tools. The first user message is the official user template with the history
"user:<the simulated user's opening>" (its API list left empty: the tools are rendered by the chat
format, as for agent_multi_step, agent.py); later user messages are the user's replies as they are.

The official loop (`Loop`) counts the messages after the user's opening, at most 40 (max_dialog_turns):
every agent message, every execution result and every user reply is one. An agent message goes to
execution when it holds "[...]" on one line and the official agent's own reading of it succeeds
(`routed_calls`: agent.read_text, and its renderer can write every argument back — a dict argument
must be a nested call {name: {arguments}}); otherwise it goes to the user. A message with tool calls is
read as its rendering `[name(k=repr(v), ...)]` (agent.render); one that cannot be read back as the same
calls (malformed arguments, a name or key no Python call can carry) is an execution step that fails,
as no official agent could have written it. Each message routed to execution is a milestone (its text).
An agent or user message containing "finish conversation" ends the loop once two messages have passed
(index > 1); an agent message that ends it is not executed.

Execution (`World`, multi_turn_utils.execute_agent_func_call): the item's classes (phone.py, travel.py)
are built at the start, each loaded with its config and then with the BaseApi config, and keep their
state through the conversation. A step's calls run in order, each on every instance that has a public
method of its name (turn_on_wifi runs on all phone classes), by keyword. Unlike agent_multi_step, the
first call that raises ends the step: the agent is told "Error during execution: {str(e)}" — verbatim,
the official string lacks its f — for every call of the step (officially its history shows that text
one character per list item), and the calls before it keep their effects. A call of an unknown name
raises only as a step's first call; after another call of the step it repeats that call's result
(the official loop re-reads its last result variable). A dotted name fails. Results are rendered after
the whole step: a str as is, a dict as JSON, anything else str().

Scoring (`score`), replaying the trajectory on fresh instances (never asking the user again): the end
state is the saved attributes of every class (Travel: users, reservations) when at least one execution
step completed without an error, else none at all; it is checked against `ground_truth` as for
agent_multi_step (agent.end_state_errors: classes the ground truth misnames, "Reminderpi" or "BaseAPI",
are not checked). Success is that end state; reward is 1.0 then, else the in-order milestone match
(agent.process_accuracy). A tool-call message is matched as its rendering, the runner keeping no raw
text: the milestones written in double quotes (items 4-7's add_reminder) match no call here, though
the same text matches officially. A trajectory whose simulated user failed (conversation.USER_ERROR
closing) is a scored failure, reward 0, whatever its end state.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping, Sequence

from environments.acebench import agent
from environments.acebench.scenarios import phone, travel
from base.benchmark import Task, Verdict
from environments.bfcl.backends import CallError
from environments.bfcl.common import bounded, call_parts

EXECUTION = "execution"
"""The name of a user-role message that shows an execution result (a text answer sent to execution)."""

CATEGORY = "agent_multi_turn"
MAX_MESSAGES = 40
"""The official loop's bound (generate.py --max-dialog-turns 40): messages after the user's opening."""
MAX_STEPS = MAX_MESSAGES // 2
"""Answers with calls in one turn: each is two of the 40 messages (the call and its execution)."""
FINISH = "finish conversation"
ERROR = "Error during execution: {str(e)}"
OVER = "The conversation is over."
CLASSES = {**phone.CLASSES, **travel.CLASSES}
FAILED = "failed"
"""`calls` of an agent message that goes to execution and fails there without running anything."""
_BRACKETS = re.compile(r"\[.*\]")
_CALLEE = re.compile(r"\b([a-zA-Z_]\w*)\s*(?=\()")


def check_classes(tid: str, item: Mapping) -> None:
    agent.check_classes(tid, item, CLASSES)


def system_prompt(item: Mapping) -> str:
    from environments.acebench import data

    p = data.multi_turn_prompts()
    classes = item.get("involved_classes") or []
    return (p["MULTI_TURN_AGENT_PROMPT_SYSTEM_EN"] + (p["TRAVEL_PROMPT_EN"] if "Travel" in classes else "")
            + (p["BASE_PROMPT_EN"] if "BaseApi" in classes else ""))


def opening_prompt(opening: str) -> str:
    from environments.acebench import data

    template = data.multi_turn_prompts()["MULTI_TURN_AGENT_PROMPT_USER_EN"]
    return template.format(functions="", history=f"user:{opening}\n")


def make_task(tid: str, item: Mapping, tools: list, split: str | None, user: Any = None) -> Task:
    check_classes(tid, item)
    env = {"benchmark": "acebench", "task_id": tid, "variant": CATEGORY,
           "user": user.record() if user is not None else None}
    meta = {"env": env, "max_steps_per_turn": MAX_STEPS}
    if split is not None:
        meta["split"] = split
    return Task(id=tid, benchmark="acebench", category=CATEGORY, tools=tools,
                turns=[[{"role": "system", "content": system_prompt(item)}]], meta=meta)


def item_of(tid: str) -> dict:
    return agent.item_of(tid, CATEGORY, CLASSES)


# ---------------------------------------------------------------------------------------- reading


def _writable(value: Any) -> bool:
    """Whether the official agent's renderer (parse_nested_value) can write an argument back."""
    if not isinstance(value, dict):
        return True
    if not value or not isinstance(next(iter(value.values())), dict):
        return False
    return all(_writable(v) for v in next(iter(value.values())).values())


def routed_calls(text: str) -> list | None:
    """The calls of an agent text the official loop sends to execution; None: it goes to the user."""
    if not isinstance(text, str) or not _BRACKETS.search(text):
        return None
    calls = agent.read_text(text)
    if calls is None or not all(_writable(v) for _, args in calls for v in args.values()):
        return None
    return calls


def read_message(message: Mapping) -> tuple[str, list | str | None]:
    """(the agent message's text as the official loop sees it, its calls: a list when it goes to
    execution, FAILED when it goes there and fails unrun, None when it goes to the user)."""
    tool_calls = message.get("tool_calls")
    if tool_calls:
        try:
            if not isinstance(tool_calls, (list, tuple)):
                raise CallError("tool_calls is not a list")
            calls = [call_parts(c) for c in tool_calls]
        except CallError:
            return json.dumps(tool_calls, ensure_ascii=False, default=str), FAILED
        text = agent.render(calls)
        routed = routed_calls(text)
        return text, routed if routed is not None and routed == [(n, dict(a)) for n, a in calls] else FAILED
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    return text, routed_calls(text)


# ---------------------------------------------------------------------------------------- execution


def _finite(value: Any) -> bool:
    """Whether repr(value) evaluates back to it (the official execution evaluates the call's text)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(k) and _finite(v) for k, v in value.items())
    return True


class World(agent.World):
    """The item's scenario instances through a conversation; `step(calls)` runs one execution message."""

    def __init__(self, item: Mapping):
        super().__init__(item, CLASSES)   # `stepped`: an execution step completed (the official result then lists every class)

    def step(self, calls: Sequence[tuple[str, dict]] | str) -> list[str]:
        """One step's observations, one per call; the step completes unless a call raises."""
        if calls == FAILED:
            return [ERROR]
        results: list[Any] = []
        last: list = []   # the official loop's last result variable, unset at a step's start
        for name, args in calls:
            shown = f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
            callee = _CALLEE.search(shown)
            if callee is None or callee.group(1) not in self.methods:
                if not last:   # UnboundLocalError officially
                    return [ERROR] * max(len(calls), 1)
                results.append(last[0])
                continue
            if callee.start() != 0 or None in args or not all(_finite(v) and not isinstance(v, dict)
                                                              for v in args.values()):
                return [ERROR] * len(calls)   # what the official execution evaluates raises
            try:
                for method in self.methods[callee.group(1)]:
                    last[:] = [method(**args)]
            except Exception:  # noqa: BLE001 - the official execution reports any exception
                return [ERROR] * len(calls)
            results.append(last[0])
        self.stepped = True
        return [agent.rendered(r) for r in results]


class Loop:
    """The official loop's bookkeeping: the message index, the milestones, and why it ended."""

    def __init__(self, world: World):
        self.world, self.index, self.over = world, 0, None
        self.milestones: list[str] = []
        self.route: list[str] = []   # each message after the opening: "ae" agent to execution, "au" agent
        #                              to user, "ea" execution to agent, "ua" user to agent
        self.executions: list[list[str]] = []   # each execution message's observations
        self.calls = self.failed_steps = 0

    def agent(self, text: str, calls: list | str | None) -> list[str] | None:
        """An agent message: its observations when it went to execution, else None (it goes to the
        user, or the loop is over: `over` says why)."""
        if self.over is None and self.index >= MAX_MESSAGES:
            self.over = "max_messages"
        if self.over is not None:
            return None
        self.index += 1
        self.route.append("au" if calls is None else "ae")
        if self.index > 2 and FINISH in text:
            self.over = "agent_finished"
            return None
        if calls is None:
            return None
        if self.index >= MAX_MESSAGES:   # its execution would be the 41st message
            self.over = "max_messages"
            return None
        self.index += 1
        self.route.append("ea")
        self.milestones.append(text)
        observations = self.world.step(calls)
        self.executions.append(observations)
        self.calls += len(calls) if isinstance(calls, list) else 0
        self.failed_steps += observations[:1] == [ERROR]
        return observations

    def user(self, text: str) -> None:
        """A reply of the simulated user."""
        if self.over is None and self.index >= MAX_MESSAGES:
            self.over = "max_messages"
        if self.over is not None:
            return
        self.index += 1
        self.route.append("ua")
        if self.index > 2 and FINISH in text:
            self.over = "user_finished"


def execution_message(observations: Sequence[str]) -> str:
    """An execution step as the official history line shows it (for a text answer sent to execution)."""
    if observations[:1] == [ERROR]:
        return "execution:" + ERROR
    parsed = []
    for o in observations:
        try:
            parsed.append(json.loads(o))
        except ValueError:
            parsed.append(o)
    return "execution:" + str(parsed)


# ---------------------------------------------------------------------------------------- scoring


def replay(item: Mapping, messages: Sequence[Mapping]) -> Loop:
    """The official loop over a trajectory's messages, on fresh instances: the first user message is
    the opening; a later user message is a reply (a message named "execution" is an execution shown
    as a user turn, and a USER_ERROR closing is no reply); tool messages are skipped."""
    from environments.user_sim import USER_ERROR

    loop = Loop(World(item))
    opened = False
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if role == "user":
            text = m.get("content") if isinstance(m.get("content"), str) else ""
            if opened and m.get("name") != EXECUTION and not text.startswith(USER_ERROR):
                loop.user(text)
            opened = True
        elif role == "assistant" and opened:
            loop.agent(*read_message(m))
        if loop.over is not None:
            break
    return loop


def score(task: Task, messages: list) -> Verdict:
    from environments.acebench import data
    from environments.user_sim import user_error

    answer = data.answer(task.id)
    loop = replay(item_of(task.id), messages)
    reason, errors = agent.end_state_errors(loop.world.state(), answer["ground_truth"])
    failed_user = user_error(messages)
    ok = reason is None and failed_user is None
    process = 1.0 if reason is None else agent.process_accuracy(loop.milestones, answer["mile_stone"])
    feedback = {"error_type": None if ok else f"acebench:{CATEGORY}:{'user_error' if failed_user else reason}",
                "mismatch": None if reason is None else bounded(errors[:10]), "process_accuracy": process,
                "steps": bounded(loop.milestones), "n_calls": loop.calls, "tool_errors": loop.failed_steps,
                "messages": loop.index, "ended": loop.over or "trajectory_end"}
    if failed_user is not None:
        feedback["user_error"] = bounded(failed_user)
    return Verdict(success=ok, reward=0.0 if failed_user else process, turn_pass=[ok], feedback=feedback)
