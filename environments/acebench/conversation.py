"""An ACEBench agent_multi_turn episode with a simulated user: the official user role
(`model_inference/multi_turn/APIModel_user.py` APIUSER, github ACEBench/ACEBench e6db74b, MIT) played by
the endpoint the user named (environments/user_sim.py), and the official loop's rules (multiturn.Loop)
for the agent's messages, reimplemented, not copied.

As the official loop runs it: the user model gets its system prompt — SYSTEM_PROMPT_BASE_EN when the item
involves BaseApi, else SYSTEM_PROMPT_TRAVEL_EN, with the item's `question` as its Instruction — and the
line "Is there anything you need help with today?" as a user turn; its answer is the opening the agent
gets. From then on the user model sees each agent text that goes to the user as a user turn (a leading
"user:" or "agent:" dropped) and its own earlier lines as *system* turns, as officially; it is decoded
greedily (temperature 0, user_sim.SEED, the endpoint's max_tokens; officially temperature 0.001 and 1000
tokens). An agent text that the official loop would send to execution instead (it holds "[...]" and
reads as calls) runs on the world, and the next turn shows its result as a user message named
"execution" ("execution:[...]", the official history line); the user is not asked then. The
conversation ends when a user reply or an agent message says "finish conversation" after the first
two messages, or after 40 messages; the user's last words are the episode's `closing`. A user call that
fails (the server went away, no text came back) ends the episode there: its `closing` is one user
message "###USER-ERROR### <why>", and the trajectory is a scored failure (multiturn.score).
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

from environments import user_sim
from environments.acebench import multiturn
from environments.acebench.multiturn import EXECUTION
from base.benchmark import Task



def user_system_prompt(item: Mapping) -> str:
    from environments.acebench import data

    p = data.multi_turn_prompts()
    template = p["SYSTEM_PROMPT_BASE_EN"] if "BaseApi" in item["involved_classes"] else p["SYSTEM_PROMPT_TRAVEL_EN"]
    return template.format(instruction=item["question"])


def strip_role(text: str) -> str:
    """APIModel_user.remove_prefix."""
    for prefix in ("user:", "agent:"):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


class Conversation:
    """The item's world and the simulated user (see the module docstring)."""

    def __init__(self, task: Task, endpoint: Any):
        from environments.acebench import data

        self.task, self.endpoint = task, endpoint
        self.item = multiturn.item_of(task.id)
        self.loop = multiturn.Loop(multiturn.World(self.item))
        self.user_messages = [{"role": "system", "content": user_system_prompt(self.item)},
                              {"role": "user", "content": data.multi_turn_prompts()["USER_OPENING_EN"]}]
        self.opened = False
        self.heard: str | None = None     # the agent text the user answers next
        self.pending: list[dict] = []     # an execution result to show instead
        self.closing: list[dict] = []
        self._client = None

    # ------------------------------------------------------------------ the seam

    def offered_tools(self) -> list:
        return self.task.tools

    def execute(self, calls: list) -> list:
        calls = calls if isinstance(calls, (list, tuple)) else [calls]
        observations = self.loop.agent(*multiturn.read_message({"tool_calls": list(calls)}))
        if observations is None:
            return [multiturn.OVER] * len(calls)
        return observations if len(observations) == len(calls) else [observations[0]] * len(calls)

    def hear(self, text: str) -> None:
        """The agent's text that ended its turn: the user answers it next, or it runs as calls."""
        text = text if isinstance(text, str) else ""
        observations = self.loop.agent(text, multiturn.routed_calls(text))
        if observations is not None:
            self.pending = [{"role": "user", "name": EXECUTION, "content": multiturn.execution_message(observations)}]
        else:
            self.heard = text

    def next_turn(self) -> list | None:
        if not self.opened:
            self.opened = True
            opening = self._ask()
            if opening is None:
                return None
            return copy.deepcopy(self.task.turns[0]) + [{"role": "user", "content": multiturn.opening_prompt(opening)}]
        if self.pending:
            turn, self.pending = self.pending, []
            return turn
        if self.loop.over is not None:
            return None
        if self.loop.index >= multiturn.MAX_MESSAGES:
            self.loop.over = "max_messages"
            return None
        self.user_messages.append({"role": "user", "content": strip_role(self.heard or "")})
        self.heard = None
        reply = self._ask()
        if reply is None:
            return None
        message = {"role": "user", "content": reply}
        self.loop.user(reply)
        if self.loop.over is not None:
            self.closing = [message]
            return None
        return [message]

    # ------------------------------------------------------------------ the user model

    def _ask(self) -> str | None:
        """The user model's next line (kept in its own history), or None when the call failed."""

        try:
            if self._client is None:
                self._client = self.endpoint.client()
            response = self._client.chat.completions.create(
                model=self.endpoint.model, messages=copy.deepcopy(self.user_messages), temperature=0,
                seed=user_sim.SEED, max_tokens=self.endpoint.max_tokens)
            text = response.choices[0].message.content
            if not isinstance(text, str):
                raise ValueError("the user model answered no text")
        except Exception as exc:  # noqa: BLE001 - the endpoint failed: a scored failure with its reason, not a crash
            self.loop.over = "user_error"
            self.closing = user_sim.failed(exc)
            return None
        self.user_messages.append({"role": "system", "content": text})
        return text
