"""Scoring a canonical trajectory with τ²-bench's own evaluator (solo mode).

The runner's OpenAI-style messages become the package's `AssistantMessage` / `ToolMessage`
objects the way the package's orchestrator would have produced them for the same answers:

- the initial turn (system prompt, ticket) is not part of a package trajectory and is skipped,
  as are any other system/user messages (solo mode has none);
- each assistant answer with calls becomes one `AssistantMessage` (requestor "assistant"; user
  device tools are routed to the user side by the solo environment), and every call is run again
  on a fresh solo environment given the task's initial state, so the tool messages are exactly
  the orchestrator's (our episode's observations are compared with them, `observation_mismatches`);
- an answer that calls `done` becomes the package's stop message (content `###STOP###`, its other
  calls dropped) and ends the trajectory: AGENT_STOP; a plain-text answer ends it too, as
  AGENT_STOP when it holds the stop token, else AGENT_ERROR (solo agents may only call tools);
  `MAX_ERRORS` tool errors end it as TOO_MANY_ERRORS; a trajectory that just stops after tool
  results (the runner's step limit) ends as MAX_STEPS. Only AGENT_STOP can earn a reward.

With a simulated user (airline, retail; conversation.py) the user's messages become `UserMessage`s
and the agent's text answers stay in the conversation: a user message with a stop token ends it as
USER_STOP, a failed user call as USER_ERROR, running out of user turns as MAX_STEPS; only
USER_STOP can earn a reward there, and `done` is no tool of those domains.

Then `tau2.evaluator.evaluator.evaluate_simulation(simulation, task, EvaluationType.ALL,
solo_mode, domain)` — `tau2 run`'s default evaluation — gives the reward; success is reward
1.0. A call whose arguments are not a JSON object (the package has no way to hold one) makes the
trajectory a scored failure with that reason, as does any exception inside the evaluator.
"""
from __future__ import annotations

import uuid
from typing import Any, Mapping, Sequence

from base.benchmark import Verdict
from environments.tau2 import package as pkg
from environments.tau2.conversation import is_stop
from environments.user_sim import user_error
from environments.tau2.episode import call_arguments


def failure(why: str, error_type: str, **extra: Any) -> Verdict:
    return Verdict(success=False, reward=0.0, turn_pass=[False],
                   feedback={"error_type": error_type, "error": why, **extra})


def _function(call: Any) -> tuple[Any, Any]:
    fn = call.get("function", call) if isinstance(call, Mapping) else {}
    fn = fn if isinstance(fn, Mapping) else {}
    return fn.get("name"), fn.get("arguments")


def package_trajectory(domain: str, task: Any, messages: Sequence[Mapping]) -> tuple[list, str, dict]:
    """(package messages, termination reason value, facts) for a canonical trajectory; raises
    ValueError with the reason for a call the package cannot represent."""
    t = pkg.tau2()
    solo = domain not in pkg.USER_DOMAINS
    Assistant, ToolCall, User = t.message.AssistantMessage, t.message.ToolCall, t.message.UserMessage
    reason = t.simulation.TerminationReason
    stop_token = t.llm_agent.LLMSoloAgent.STOP_TOKEN
    env = pkg.new_environment(domain)
    pkg.apply_initial_state(env, task)
    state = task.initial_state
    trajectory = list(state.message_history or []) if state is not None else []
    recorded = {m.get("tool_call_id"): m.get("content") for m in messages
                if isinstance(m, Mapping) and m.get("role") == "tool"}
    facts = {"tool_errors": 0, "calls": 0, "observation_mismatches": 0}
    ended = None
    failed_user = None if solo else user_error(messages)
    for m in messages:
        role = m.get("role") if isinstance(m, Mapping) else None
        if not solo and role == "user":
            text = m.get("content") if isinstance(m.get("content"), str) else ""
            if failed_user is not None and m is messages[-1]:
                ended = reason.USER_ERROR
                break
            trajectory.append(User(role="user", content=text))
            if is_stop(text):
                ended = reason.USER_STOP
                break
            continue
        if role != "assistant":
            continue
        content = m.get("content") if isinstance(m.get("content"), str) and m.get("content") else None
        calls = m.get("tool_calls") or []
        if not calls and not solo:
            trajectory.append(Assistant(role="assistant", content=content or ""))
            continue
        if not calls:
            trajectory.append(Assistant(role="assistant", content=content or ""))
            ended = reason.AGENT_STOP if content and stop_token in content else reason.AGENT_ERROR
            break
        parsed = []
        for k, call in enumerate(calls):
            name, raw = _function(call)
            args, why = call_arguments(raw)
            if not isinstance(name, str) or args is None:
                raise ValueError(f"call {k + 1} of assistant answer {facts['calls'] + 1}: "
                                 f"{why or 'the call has no function name'}")
            parsed.append((call.get("id") if isinstance(call, Mapping) else None, name, args))
        if solo and any(name == pkg.STOP_TOOL for _, name, _ in parsed):
            trajectory.append(Assistant(role="assistant", content=stop_token))
            ended = reason.AGENT_STOP
            break
        tool_calls = []
        for cid, name, args in parsed:
            facts["calls"] += 1
            tool_calls.append(ToolCall(id=f"tc_{facts['calls']}", name=name, arguments=args, requestor="assistant"))
        trajectory.append(Assistant(role="assistant", content=content, tool_calls=tool_calls))
        for (cid, _, _), tc in zip(parsed, tool_calls):
            tm = env.get_response(tc)
            trajectory.append(tm)
            facts["tool_errors"] += int(bool(tm.error))
            if cid in recorded and recorded[cid] != tm.content:
                facts["observation_mismatches"] += 1
        if facts["tool_errors"] >= pkg.MAX_ERRORS:
            ended = reason.TOO_MANY_ERRORS
            break
    if ended is None:
        ended = reason.MAX_STEPS if len(trajectory) else reason.AGENT_ERROR
    if failed_user is not None:
        facts["user_error"] = failed_user
    for i, msg in enumerate(trajectory):
        msg.turn_idx = i
    return trajectory, ended.value, facts


def evaluate(domain: str, task: Any, trajectory: list, termination: str) -> Any:
    """The package's `RewardInfo` for a package trajectory (what `tau2 run` computes in solo mode)."""
    t = pkg.tau2()
    now = t.utils.get_now()
    sim = t.simulation.SimulationRun(id=str(uuid.uuid4()), task_id=task.id, start_time=now, end_time=now,
                                     duration=0.0, termination_reason=termination, messages=trajectory)
    ev = t.evaluator
    return ev.evaluate_simulation(simulation=sim, task=task, evaluation_type=ev.EvaluationType.ALL,
                                  solo_mode=domain not in pkg.USER_DOMAINS, domain=domain)


def reward_feedback(info: Any) -> dict:
    """The package's reward breakdown as plain JSON data."""
    def val(x: Any) -> Any:
        return getattr(x, "value", x)

    out: dict = {"reward_basis": [val(b) for b in info.reward_basis or []],
                 "reward_breakdown": {str(val(k)): v for k, v in (info.reward_breakdown or {}).items()}}
    if info.db_check is not None:
        out["db_match"] = info.db_check.db_match
    out["env_assertions"] = [{"func_name": c.env_assertion.func_name, "env_type": c.env_assertion.env_type,
                              "arguments": c.env_assertion.arguments, "assert_value": c.env_assertion.assert_value,
                              "met": c.met, "message": c.env_assertion.message}
                             for c in info.env_assertions or []]
    out["communicate_checks"] = [{"info": c.info, "met": c.met} for c in info.communicate_checks or []]
    out["action_checks"] = [{"name": c.action.name, "arguments": c.action.arguments, "match": c.action_match}
                            for c in info.action_checks or []]
    if info.info:
        out["info"] = info.info
    return out


def error_type(termination: str, feedback: Mapping) -> str:
    if termination not in ("agent_stop", "user_stop"):
        return f"tau2:{termination}"
    if any(not c["met"] for c in feedback.get("env_assertions", [])):
        return "tau2:env_assertion_failed"
    if any(not c["match"] for c in feedback.get("action_checks", [])):
        return "tau2:action_missing"
    if feedback.get("db_match") is False:
        return "tau2:db_mismatch"
    if any(not c.get("met", True) for c in feedback.get("communicate_checks", [])):
        return "tau2:info_not_communicated"
    return "tau2:reward_below_1"


def score(domain: str, task: Any, messages: Sequence[Mapping]) -> Verdict:
    """The package's verdict on a canonical trajectory (see the module docstring); never raises."""
    try:
        trajectory, termination, facts = package_trajectory(domain, task, messages)
    except ValueError as exc:
        return failure(f"malformed tool call: {exc}", "tau2:malformed_call")
    except Exception as exc:  # the environment refused the trajectory: a scored failure, not a crash
        return failure(f"{type(exc).__name__}: {exc}", "tau2:replay_error")
    try:
        info = evaluate(domain, task, trajectory, termination)
    except Exception as exc:
        return failure(f"the tau2 evaluator failed: {type(exc).__name__}: {exc}", "tau2:evaluator_error",
                       termination_reason=termination, **facts)
    reward = float(info.reward)
    feedback = {"termination_reason": termination, "reward": reward, **facts, **reward_feedback(info)}
    success = reward == 1.0
    if not success:
        feedback["error_type"] = error_type(termination, feedback)
    return Verdict(success=success, reward=reward, turn_pass=[success], feedback=feedback)
