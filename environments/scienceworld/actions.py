"""What ScienceWorld's actions look like in the project's canonical format (DESIGN: Formats).

A ScienceWorld action is one line of text ("open door to kitchen"). The agent takes it as a call
of the one tool `act` with the argument `action`; the simulator's reply is the tool message. A
task is one user turn: the task description and the first look around. The episode ends when the
agent answers without a call, when the simulator says the task is over, or at the step limit.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

TOOL_NAME = "act"
ACT_TOOL = {"type": "function", "function": {
    "name": TOOL_NAME,
    "description": "Take one action in the ScienceWorld simulator and get its observation. Actions are short "
                   "commands such as 'look around', 'open door to kitchen', 'go to kitchen', 'pick up thermometer', "
                   "'focus on substance in pot', 'use thermometer in inventory on water', 'wait1', 'inventory'.",
    "parameters": {"type": "object", "properties": {
        "action": {"type": "string", "description": "the action, one command in plain words"}},
        "required": ["action"]}}}
INVALID_ACTION = "No known action matches that input."   # the simulator's reply to text it cannot parse
DONE_MESSAGE = "The task is already over; no action is taken."
CLOSING_REPLY = "I have completed the task."


def user_text(description: str, observation: str) -> str:
    """The task's one user message."""
    return f"{description.strip()}\n\n{observation.strip()}"


def normalize(action: str) -> str:
    """An action as the simulator's parser reads it: lower case, single spaces."""
    return " ".join(str(action).lower().split())


def action_of(call: Mapping) -> str | None:
    """The action of an `act` call ({"name", "arguments"} or an OpenAI tool call), or None when
    the call is not an `act` call with a string `action`."""
    fn = call.get("function", call)
    if fn.get("name") != TOOL_NAME:
        return None
    args: Any = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except ValueError:
            return None
    if not isinstance(args, Mapping) or not isinstance(args.get("action"), str):
        return None
    return args["action"]


def actions_of(messages: Sequence[Mapping]) -> tuple[list[str], int]:
    """(the actions of a trajectory's `act` calls in order, how many calls were not `act` calls
    with an action)."""
    actions, invalid = [], 0
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or ():
            action = action_of(call)
            if action is None:
                invalid += 1
            else:
                actions.append(action)
    return actions, invalid


def call_message(call_id: str, action: str, content: str = "") -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": TOOL_NAME, "arguments": json.dumps({"action": action}, ensure_ascii=False)}}]}


def tool_message(call_id: str, observation: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "name": TOOL_NAME, "content": observation}


def render(user: str, actions: Sequence[str], observations: Sequence[str], *, closing: str | None = CLOSING_REPLY,
           chatter: Mapping[int, str] | None = None) -> list[dict]:
    """A canonical trajectory: the user message, then per action an `act` call and its observation,
    then an optional closing reply. `chatter` puts text beside the call of some steps."""
    messages = [{"role": "user", "content": user}]
    for i, (action, obs) in enumerate(zip(actions, observations)):
        cid = f"call_{i}"
        messages.append(call_message(cid, action, (chatter or {}).get(i, "")))
        messages.append(tool_message(cid, obs))
    if closing:
        messages.append({"role": "assistant", "content": closing})
    return messages
