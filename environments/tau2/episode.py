"""A τ²-bench solo-mode episode: the calls of our runner run on the package's own environment.

One turn (the solo prompt: system + ticket); no later turn (solo mode has no user). Each call
goes to `Environment.get_response` of a solo-mode environment that was given the task's initial
state as the package's orchestrator gives it, so the observation is the package's tool message
text (its "Error: …" texts included). As in the package's orchestrator:

- a batch that calls `done` ends the task there: `done` answers the package's stop token and the
  batch's other calls do not run (`LLMSoloAgent._check_if_stop_toolcall` drops them);
- after `MAX_ERRORS` tool errors the task is over (TOO_MANY_ERRORS);
- once over, further calls are answered without running.

Calls the package could not represent (arguments that are not a JSON object) get an error
observation here and make the trajectory a scored failure (scoring.py).
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from environments.tau2 import package as pkg

OVER = "The task is over ({why}); this call was not run."
NOT_RUN_AFTER_DONE = f"Not run: this answer called `{pkg.STOP_TOOL}`, which ends the task."


def call_arguments(raw: Any) -> tuple[dict | None, str | None]:
    """(arguments as a dict, None) or (None, why they are unusable)."""
    if isinstance(raw, Mapping):
        return dict(raw), None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return None, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as exc:
        return None, f"arguments are not valid JSON ({exc})"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


class Tau2Episode:
    """Runs one task's calls on the package's solo environment (see the module docstring)."""

    def __init__(self, domain: str, package_task: Any, turns: list, tools: list):
        self.domain, self.package_task = domain, package_task
        self._turns = list(turns)
        self._tools = list(tools)
        self._names = {t["function"]["name"] for t in tools}
        self.env = pkg.new_environment(domain)
        pkg.apply_initial_state(self.env, package_task)
        self.errors = 0
        self.over: str | None = None   # why the task ended, once it has
        self._n = 0

    def next_turn(self) -> list | None:
        return self._turns.pop(0) if self._turns else None

    def offered_tools(self) -> list:
        return list(self._tools)

    def execute(self, calls: Sequence[Mapping]) -> list:
        calls = list(calls or [])
        names = [c.get("name") if isinstance(c, Mapping) else None for c in calls]
        if self.over is None and pkg.STOP_TOOL in names:
            self.over = f"`{pkg.STOP_TOOL}` was called"
            return [pkg.tau2().llm_agent.LLMSoloAgent.STOP_TOKEN if n == pkg.STOP_TOOL else NOT_RUN_AFTER_DONE
                    for n in names]
        out = []
        for call in calls:
            if self.over is not None:
                out.append(OVER.format(why=self.over))
                continue
            try:
                obs, error = self._run(call)
            except Exception as exc:  # never raise into the runner
                obs, error = f"Error: {type(exc).__name__}: {exc}", True
            out.append(obs)
            self.errors += int(error)
            if self.errors >= pkg.MAX_ERRORS:
                self.over = f"{pkg.MAX_ERRORS} tool errors"
        return out

    def _run(self, call: Any) -> tuple[str, bool]:
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            return "Error: a tool call needs a name and arguments", True
        args, why = call_arguments(call.get("arguments"))
        if args is None:
            return f"Error: {why}", True
        self._n += 1
        tool_call = pkg.tau2().message.ToolCall(id=f"call_{self._n}", name=call["name"], arguments=args,
                                                requestor="assistant")
        msg = self.env.get_response(tool_call)
        return msg.content if msg.content is not None else "", bool(msg.error)
