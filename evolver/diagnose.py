"""Rule-based diagnosis: failure families from checker errors and trajectory shape, and
CoEvolve's behavioural signals (forgetting, boundary, rare). No LLM needed.

Input: the evaluated trajectories (canonical records with `outcome` and `meta.feedback`,
`meta.format_errors`, `meta.step_limit_turn`, `meta.turn_pass`, `meta.sample`, as
benchmarks/runner.py writes them). Output: DESIGN's `failed_points.json` and `signals.json`.
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from typing import Iterable, Mapping, Sequence

# family → (what failed, what curation could do about it)
FAMILIES = {
    "unparseable_call": ("the agent's output could not be parsed as a tool call",
                         "train on well-formed calls only; mask or drop malformed ones"),
    "unknown_tool": ("the agent called a tool that is not offered",
                     "put the offered tools' exact signatures into memory; drop calls to unknown tools"),
    "bad_arguments": ("the agent called the right tool with wrong, missing or mistyped arguments",
                      "show signatures and argument constraints; mask erroneous calls that were corrected"),
    "unwanted_call": ("the agent called a tool where no call was wanted",
                      "keep trajectories that answer without tools"),
    "tool_error_not_recovered": ("a tool returned an error and the agent never recovered",
                                 "train on recovery after errors; constraints from recurring errors in memory"),
    "state_mismatch": ("the environment ended in a different state than the gold actions leave",
                       "drop trajectories that end in a wrong state; RL with state_match rewards"),
    "missing_output": ("the agent's answers missed information the gold execution returns",
                       "drop failed trajectories; keep closing replies that report results"),
    "empty_turn": ("the agent produced nothing for a user turn", "drop abandoned trajectories"),
    "repeated_call_loop": ("the agent repeated the same call again and again", "drop trajectories with redundant repeated calls"),
    "premature_stop": ("the agent stopped a turn without the calls it needed", "train whole trajectories; drop abandoned ones"),
    "step_limit": ("the agent hit the step limit of a turn", "drop trajectories that loop; shorter decision segments"),
}
UNKNOWN = re.compile(r"not defined|unknown (tool|function)|not (offered|available)|no such (tool|function)|wrong[_ ]func", re.I)
ARGUMENT = re.compile(r"argument|parameter|missing_required|unexpected|type_error|value_error|TypeError|ValueError|invalid", re.I)
ERROR = re.compile(r"^\s*(\{\s*\"error\"|error|Error during execution|Traceback)|'error':|\"error\":", re.I)
REPEATS = 3   # identical consecutive calls that make a loop


def _calls(messages: Sequence[Mapping]) -> Iterable[tuple[int, Mapping, str | None]]:
    """(turn, call, its observation) in order; turns count user messages."""
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m["role"] == "tool"}
    turn = -1
    for m in messages:
        if m["role"] == "user":
            turn += 1
        for call in m.get("tool_calls") or ():
            yield turn, call, results.get(call["id"])


def _signature(call: Mapping) -> str:
    return f"{call['function']['name']}({call['function']['arguments']})"


def families(trajectory: Mapping) -> list[tuple[str, str]]:
    """The failure families of one failed trajectory, each with a line of evidence."""
    meta = trajectory.get("meta") or {}
    fb = meta.get("feedback") or {}
    error_type = str(fb.get("error_type") or "")
    found: dict[str, str] = {}

    def add(family: str, evidence: str) -> None:
        found.setdefault(family, evidence[:240])

    if meta.get("format_errors"):
        add("unparseable_call", str(meta["format_errors"][0].get("error")))
    if meta.get("step_limit_turn") is not None or "force_terminated" in error_type:
        add("step_limit", f"turn {meta.get('step_limit_turn')} reached {meta.get('max_steps')} steps")
    if "state_mismatch" in error_type:
        add("state_mismatch", json.dumps(fb.get("state_diff") or fb.get("details") or error_type)[:240])
    if "execution_response_mismatch" in error_type:
        add("missing_output", json.dumps(fb.get("missing") or fb.get("details") or error_type)[:240])
    if "empty_turn" in error_type:
        add("empty_turn", error_type)
    if "irrelevance" in error_type:
        add("unwanted_call", error_type)
    message = f"{error_type} {fb.get('checker_message') or ''}"
    if error_type and not found:
        if UNKNOWN.search(message):
            add("unknown_tool", message)
        elif ARGUMENT.search(message):
            add("bad_arguments", message)
        elif "decoder_failed" in error_type:
            add("unparseable_call", message)

    calls = list(_calls(trajectory["messages"]))
    failed_tools: dict[str, str] = {}
    for _, call, result in calls:
        name = call["function"]["name"]
        if result is not None and ERROR.search(result):
            if UNKNOWN.search(result):
                add("unknown_tool", f"{name}: {result}")
            elif ARGUMENT.search(result):
                add("bad_arguments", f"{name}: {result}")
            failed_tools[name] = result
        else:
            failed_tools.pop(name, None)   # a later success of the same tool is a recovery
    if failed_tools:
        name, result = sorted(failed_tools.items())[0]
        add("tool_error_not_recovered", f"{name}: {result}")
    run, previous = 0, None
    for _, call, _ in calls:
        run = run + 1 if _signature(call) == previous else 1
        previous = _signature(call)
        if run >= REPEATS:
            add("repeated_call_loop", f"{previous} repeated {run} times")
            break
    if not found:
        turn_pass = meta.get("turn_pass") or []
        called = {t for t, _, _ in calls}
        for turn, ok in enumerate(turn_pass):
            if not ok and turn not in called:
                add("premature_stop", f"turn {turn} failed without any tool call")
                break
    if not found:
        add("missing_output", error_type or "failed without a recognised cause")
    return sorted(found.items())


def _action_patterns(trajectory: Mapping) -> set[str]:
    names = [call["function"]["name"] for _, call, _ in _calls(trajectory["messages"])]
    return {" → ".join(names[i:i + 2]) for i in range(len(names) - 1)} | set(names)


def diagnose(trajectories: Sequence[Mapping], passed_before: Iterable[str] = (), rare_share: float = 0.05) -> tuple[list, dict]:
    """(failed_points, signals) for one evaluation.

    `passed_before`: task ids that passed under an earlier accepted strategy (forgetting).
    Boundary: tasks with mixed outcomes over repeated samples. Rare: action patterns that are
    rare over all trajectories (≤ `rare_share` of them) yet recur in at least two failures.
    """
    by_task: dict[str, list[bool]] = defaultdict(list)
    grouped: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for t in trajectories:
        task_id = (t.get("meta") or {}).get("task_id", t["id"])
        success = bool((t.get("outcome") or {}).get("success"))
        by_task[task_id].append(success)
        if not success:
            for family, evidence in families(t):
                grouped[family].append((task_id, evidence))
    failed_points = []
    for family, hits in sorted(grouped.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        what, hint = FAMILIES[family]
        evidence = Counter(e for _, e in hits).most_common(1)[0][0]
        failed_points.append({"failed_point": what, "evidence": evidence, "curation_hint": hint, "family": family,
                              "task_ids": sorted({t for t, _ in hits}), "count": len(hits), "source": "rules"})
    failing = {task for task, outcomes in by_task.items() if not any(outcomes)}
    patterns = Counter(p for t in trajectories for p in _action_patterns(t))
    failed_patterns: dict[str, set] = defaultdict(set)
    for t in trajectories:
        if not (t.get("outcome") or {}).get("success"):
            for p in _action_patterns(t):
                failed_patterns[p].add((t.get("meta") or {}).get("task_id", t["id"]))
    limit = max(1, rare_share * len(trajectories))
    rare = [{"pattern": p, "count": patterns[p], "task_ids": sorted(ids)}
            for p, ids in sorted(failed_patterns.items()) if len(ids) >= 2 and patterns[p] <= limit]
    signals = {
        "families": {f: len(h) for f, h in sorted(grouped.items())},
        "forgetting": sorted(failing & set(passed_before)),
        "boundary": sorted(task for task, outcomes in by_task.items() if len(set(outcomes)) > 1),
        "rare": rare,
    }
    return failed_points, signals
