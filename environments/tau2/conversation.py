"""A τ²-bench episode with a simulated user (airline, retail): the package's `UserSimulator` over the
endpoint the user named, the package's environment for the agent's calls.

As the package's orchestrator runs it: the agent opens with its default first message; the user
simulator (its system prompt: the package's guidelines and the task's user scenario) answers every
text message of the agent; the agent's calls go to the environment (episode.Tau2Episode's rules:
`MAX_ERRORS` tool errors end the task). The conversation ends when the user's message holds one
of the package's stop tokens (`###STOP###`, `###TRANSFER###`, `###OUT-OF-SCOPE###`: USER_STOP),
or after `MAX_USER_TURNS` user messages (MAX_STEPS). The user's last message is the episode's
`closing` turn, recorded but not answered.

The user's replies are the endpoint's (decoded greedily) and are part of the trajectory; scoring
(scoring.py, non-solo) reads them from it and never asks the endpoint. A user call that fails
(the server went away, a context window exceeded) ends the task there as a scored failure whose
reason the trajectory keeps (`user_error`), not a crash.
"""
from __future__ import annotations

import copy
from typing import Any

from environments import user_sim
from environments.tau2 import package as pkg
from environments.tau2.episode import Tau2Episode

MAX_USER_TURNS = 15
"""User messages per task: airline's and retail's gold conversations take 3–10; the package's own
bound is 100 orchestrator steps (agent, user and tool messages together)."""


class Tau2Conversation(Tau2Episode):
    """Tau2Episode's calls, plus the simulated user (see the module docstring)."""

    def __init__(self, domain: str, package_task: Any, turns: list, tools: list, endpoint: Any):
        super().__init__(domain, package_task, turns, tools)
        self.user = pkg.user_simulator(package_task, endpoint)
        self.user_state = self.user.get_init_state()
        self.heard: str = turns[0][-1]["content"]   # the agent's opening message
        self.user_turns = 0
        self.closing: list[dict] = []

    def hear(self, text: str) -> None:
        """The agent's text answer that ended its turn: what the user answers next."""
        self.heard = text or ""

    def next_turn(self) -> list | None:
        opening = self._turns.pop(0) if self._turns else None
        if self.over is not None:
            return None
        if self.user_turns >= MAX_USER_TURNS:
            self.over = f"{MAX_USER_TURNS} user turns"
            return None
        try:
            reply, self.user_state = self.user.generate_next_message(
                pkg.tau2().message.AssistantMessage(role="assistant", content=self.heard), self.user_state)
            text = reply.content or ""
        except Exception as exc:   # the endpoint failed: a scored failure with its reason, not a crash
            self.over = "the simulated user failed"
            self.closing = user_sim.failed(exc)
            return None
        self.user_turns += 1
        message = {"role": "user", "content": text}
        if is_stop(text):
            self.over = "the user ended the conversation"
            self.closing = [message]
            return None
        return (copy.deepcopy(opening) if opening else []) + [message]


def is_stop(text: str) -> bool:
    """The package's `UserSimulator.is_stop` on a text message."""
    from tau2.user.base import OUT_OF_SCOPE, STOP, TRANSFER

    return any(token in (text or "") for token in (STOP, TRANSFER, OUT_OF_SCOPE))
