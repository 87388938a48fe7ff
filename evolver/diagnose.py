"""Rule-based diagnosis: the failure family of each failed trajectory, read from the official
checker's verdict first and the trajectory's shape second. No LLM needed.

Input: evaluated trajectories (canonical records with `outcome` and `meta.feedback`,
`meta.format_errors`, `meta.step_limit_turn`, `meta.turn_pass`, as environments/runner.py writes
them). Output: DESIGN's `failed_points.json`; `signals.json` adds CoEvolve's signals
(evolver/signals.py) to the family counts made here.

Order of precedence. A failed trajectory gets one *primary* family from its checker verdict —
the first rule that applies, in this order:

1. the runner recorded a format error (an answer it could not read as calls), or the checker
   could not read the calls (`decoder_wrong_output_format`, `ast_checker:exception`), or the
   decoder failed on text that held a broken call → `unparseable_call`;
2. the decoder found no call where one was needed (`ast_decoder:decoder_failed` "Invalid syntax.
   Failed to decode AST. No function call.", `relevance_error:decoder_failed`) → `missing_call`
   — before any argument rule: its message says "Invalid syntax", which is not about arguments;
3. a call where none was wanted (`irrelevance_error:decoder_success`, single- and multi-turn)
   → `unwanted_call`;
4. `multi_turn:force_terminated` → `step_limit` when the runner hit a turn's step limit, else
   `premature_stop` (the trajectory ended before the task's last turn);
5. `multi_turn:empty_turn_model_response` → `empty_turn`;
6. `multi_turn:instance_state_mismatch` → `state_mismatch`;
7. `multi_turn:execution_response_mismatch` → `missing_output`;
8. `*:wrong_func_name` → `unknown_tool` when a called name is not on offer, else `wrong_tool`;
9. `*:wrong_count` → `wrong_call_count`;
10. argument checks (`missing_required`, `unexpected_param`, `missing_optional`, `type_error:*`,
    `value_error:*`, `dict_checker`/`list_dict_checker:unclear`, parallel `cannot_find_match`)
    → `bad_arguments`;
11. any other failure → `unclassified` (its error type is the evidence).

A next-call evaluation (a user's corpus without an environment) writes one record per held-out
trajectory whose `meta.steps` hold the model's answer at each scored step with its verdict
(environments/next_call/scoring.py): its error type `next-call:<family>` (`replay:<family>` in runs made before issue 61) names the family of its first
wrong answer directly, every other wrong answer adds its family, and the shape rules are skipped —
the messages are the corpus's recorded ones, not the agent's.

Secondary families: the multi-turn per-turn checks (`feedback.turn_errors`) read by the same
rules — BFCL's multi-turn verdict does not fail a task for a call in a turn that wanted none, the
per-turn check does — and the trajectory's shape: a tool error naming an unknown tool
(`unknown_tool`), a tool error never followed by a success of that tool
(`tool_error_not_recovered`), the same call REPEATS times in a row (`repeated_call_loop`), a call
to a tool the task does not offer that a memory hint in the prompt names (`misled_by_memory`: the
hints the evaluation put after "Hints from earlier experience:", trainer/memory.py).
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from typing import Mapping, Sequence

from base import registry
from trainer.memory import HEADER as HINTS
from evolver import signals as sig
from evolver.signals import calls_of as _calls, task_id_of

# family → (what failed, what curation could do about it)
FAMILIES = {
    "unparseable_call": ("the agent's output could not be parsed as a tool call",
                         "train on well-formed calls only; mask or drop malformed ones"),
    "missing_call": ("the agent answered in text where a tool call was needed",
                     "train on trajectories that act with tools; RL on the tool-call steps"),
    "unwanted_call": ("the agent called a tool where no call was wanted",
                      "keep and weight trajectories that answer without tools"),
    "unknown_tool": ("the agent called a tool that is not offered",
                     "put the offered tools' exact signatures into memory; drop calls to unknown tools"),
    "wrong_tool": ("the agent called an offered tool, but not the one the task needs",
                   "tool signatures and task-family facts in memory; RL on tool choice"),
    "wrong_call_count": ("the agent made too many or too few calls",
                         "train on trajectories with parallel calls; drop redundant repeated calls"),
    "bad_arguments": ("the agent called the right tool with wrong, missing or mistyped arguments",
                      "show signatures and argument constraints; mask erroneous calls that were corrected"),
    "tool_error_not_recovered": ("a tool returned an error and the agent never recovered",
                                 "train on recovery after errors; constraints from recurring errors in memory"),
    "state_mismatch": ("the environment ended in a different state than the gold actions leave",
                       "drop trajectories that end in a wrong state; RL with state_match rewards"),
    "missing_output": ("the agent's answers missed information the gold execution returns",
                       "drop failed trajectories; keep closing replies that report results"),
    "empty_turn": ("the agent produced nothing for a user turn", "drop abandoned trajectories"),
    "repeated_call_loop": ("the agent repeated the same call again and again", "drop trajectories with redundant repeated calls"),
    "misled_by_memory": ("the agent called a tool that a memory hint names but the task does not offer",
                         "keep memory to facts about the task's own tools; remove hints that name other tools"),
    "premature_stop": ("the agent stopped before the task's last turn", "train whole trajectories; drop abandoned ones"),
    "step_limit": ("the agent hit the step limit of a turn", "drop trajectories that loop; shorter decision segments"),
    "unclassified": ("the checker failed the task for a reason no rule names", "drop failed trajectories"),
}
# The checker rules 2–11 of the module docstring: (error-type pattern, family), first match wins. Each
# environment maps its official checker's error types (`base.environment`: checker_rules;
# BFCL's in environments/bfcl/environment.py); taken in registry order, each rule once.
CHECKER_RULES = tuple(dict.fromkeys(rule for e in registry.environments() for rule in e.checker_rules()))
_RULES = tuple((re.compile(p), f) for p, f in CHECKER_RULES)
UNKNOWN = re.compile(r"not defined|unknown (tool|function)|not (offered|available)|no such (tool|function)", re.I)
ERROR = re.compile(r"^\s*(\{\s*\"error\"|error|Error during execution|Traceback)|'error':|\"error\":", re.I)
REPEATS = 3   # identical consecutive calls that make a loop
# error-type prefixes that name a family directly (the next-call judge's "next-call:<family>"), and their
# spelling in the records of runs made before issue 61 ("replay:<family>": registry.OLD_NAMES)
FAMILY_PREFIXES = tuple(e.family_prefix for e in registry.environments() if e.family_prefix)
FAMILY_PREFIXES += tuple(f"{old}:" for old, new in registry.OLD_NAMES.items() if f"{new}:" in FAMILY_PREFIXES)


def _signature(call: Mapping) -> str:
    return f"{call['function']['name']}({call['function']['arguments']})"


def _offered(trajectory: Mapping) -> set[str]:
    return {(t.get("function") or t).get("name") for t in trajectory.get("tools") or ()}


def hinted_tools(trajectory: Mapping, calls: Sequence | None = None) -> list[str]:
    """Tools the trajectory called (`calls`: its `calls_of`, when read already) that its task does
    not offer and that a memory hint in its system prompt names."""
    system = next((m.get("content") or "" for m in trajectory["messages"] if m.get("role") == "system"), "")
    _, header, hints = system.partition(HINTS)
    if not header:
        return []
    calls = _calls(trajectory["messages"]) if calls is None else calls
    called = {call["function"]["name"] for _, call, _ in calls} - _offered(trajectory)
    return sorted(n for n in called if n and re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", hints))


def primary_family(trajectory: Mapping, error_type: str | None = None) -> tuple[str, str]:
    """The family of a failed trajectory's checker verdict (rules 1–11), with its evidence;
    `error_type` reads another of its error types (a per-turn check's) by the same rules."""
    meta = trajectory.get("meta") or {}
    fb = meta.get("feedback") or {}
    if error_type is not None:
        meta, fb = {**meta, "format_errors": []}, {"error_type": error_type, "calls": fb.get("calls")}
    error_type = str(fb.get("error_type") or "")
    message = str(fb.get("checker_message") or "")
    evidence = f"{error_type}: {message}".strip(": ")
    named = next((error_type[len(p):] for p in FAMILY_PREFIXES if error_type.startswith(p)), None)
    if named in FAMILIES:   # a judge that names the family itself (next-call)
        return named, message or evidence
    if meta.get("format_errors"):
        return "unparseable_call", str(meta["format_errors"][0].get("error"))
    if "decoder_failed" in error_type and fb.get("parse_error"):
        return "unparseable_call", str(fb["parse_error"])
    for pattern, family in _RULES:
        if not pattern.search(error_type):
            continue
        if family == "step_limit|premature_stop":
            if meta.get("step_limit_turn") is not None:
                return "step_limit", f"turn {meta['step_limit_turn']} reached {meta.get('max_steps')} steps"
            return "premature_stop", evidence
        if family == "unknown_tool|wrong_tool":
            called = {c.get("name") for c in fb.get("calls") or ()} | {c["function"]["name"] for _, c, _ in _calls(trajectory["messages"])}
            unknown = sorted(n for n in called - _offered(trajectory) if n)
            return ("unknown_tool", f"{evidence} (not offered: {', '.join(unknown)})") if unknown else ("wrong_tool", evidence)
        if family == "state_mismatch" and fb.get("state_diff"):
            evidence = f"{error_type}: {json.dumps(fb['state_diff'], ensure_ascii=False)}"
        if family == "missing_output" and fb.get("missing_items"):
            evidence = f"{error_type}: {json.dumps(fb['missing_items'], ensure_ascii=False)}"
        return family, evidence
    return "unclassified", evidence or "failed without a checker error type"


def families(trajectory: Mapping) -> list[tuple[str, str]]:
    """The failure families of one failed trajectory, each with a line of evidence: the primary
    family first, then the families of the trajectory's shape."""
    found: dict[str, str] = {}

    def add(family: str, evidence: str) -> None:
        found.setdefault(family, evidence[:240])

    add(*primary_family(trajectory))
    steps = (trajectory.get("meta") or {}).get("steps")
    if steps is not None:   # a next-call record: only the model's answers at its steps speak for it
        for s in steps:
            if s.get("verdict") in FAMILIES:
                add(s["verdict"], f"step {s.get('step')}: {s.get('why')}")
        return list(found.items())
    for turn in ((trajectory.get("meta") or {}).get("feedback") or {}).get("turn_errors") or ():
        family, evidence = primary_family(trajectory, turn.get("error_type") or "")
        if family not in ("unclassified", "step_limit", "premature_stop"):   # a cut-off turn repeats the primary
            add(family, f"turn {turn.get('turn')}: {evidence}")
    calls = list(_calls(trajectory["messages"]))
    failed_tools: dict[str, str] = {}
    for _, call, result in calls:
        name = call["function"]["name"]
        if result is not None and ERROR.search(result):
            if UNKNOWN.search(result):
                add("unknown_tool", f"{name}: {result}")
            failed_tools[name] = result
        else:
            failed_tools.pop(name, None)   # a later success of the same tool is a recovery
    if failed_tools and (trajectory.get("meta") or {}).get("max_steps") != 1:  # 1: no step left to recover in
        name, result = sorted(failed_tools.items())[0]
        add("tool_error_not_recovered", f"{name}: {result}")
    hinted = hinted_tools(trajectory, calls)
    if hinted:
        add("misled_by_memory", f"called {', '.join(hinted)}: not offered, named in a memory hint")
    run, previous = 0, None
    for _, call, _ in calls:
        run = run + 1 if _signature(call) == previous else 1
        previous = _signature(call)
        if run >= REPEATS:
            add("repeated_call_loop", f"{previous} repeated {run} times")
            break
    return list(found.items())


def failed_points(trajectories: Sequence[Mapping]) -> list[dict]:
    """DESIGN's failed_points.json: one entry per family, most frequent first."""
    grouped: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for t in trajectories:
        if not (t.get("outcome") or {}).get("success"):
            for family, evidence in families(t):
                grouped[family].append((task_id_of(t), evidence))
    points = []
    for family, hits in sorted(grouped.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        what, hint = FAMILIES[family]
        evidence = Counter(e for _, e in hits).most_common(1)[0][0]
        points.append({"failed_point": what, "evidence": evidence, "curation_hint": hint, "family": family,
                       "task_ids": sorted({t for t, _ in hits}), "count": len(hits), "source": "rules"})
    return points


def family_counts(points: Sequence[Mapping]) -> dict[str, int]:
    return {p["family"]: p["count"] for p in sorted(points, key=lambda p: p["family"]) if p.get("source") == "rules"}


# A point read from the diagnosed strategy's curation stats (profile.json), not from a failed trajectory: the
# corpus records outcomes (tau-bench's reward, ToolBench's win) and the curation trains on failures.
TRAINED_FAILURES = "trained_failures"


def outcome_point(curation_stats: Mapping | None) -> dict | None:
    """The failed point `trained_failures` when the curation kept raw trajectories whose recorded
    outcome is a failure (the curation stats' raw.retained_outcomes, sandbox.checker); None otherwise."""
    raw = (curation_stats or {}).get("raw") or {}
    kept, mix = (raw.get("retained_outcomes") or {}).get("failure", 0), raw.get("outcomes") or {}
    if not kept:
        return None
    return {"failed_point": "the curated data trains on trajectories whose recorded outcome is a failure",
            "evidence": f"{kept} of the {raw.get('retained')} retained raw trajectories recorded a failure "
                        f"(corpus: {mix.get('success', 0)} succeeded, {mix.get('failure', 0)} failed, "
                        f"{mix.get('unknown', 0)} unknown)",
            "curation_hint": "drop them (keep successes and unknown outcomes), or keep them only as masked context",
            "family": TRAINED_FAILURES, "task_ids": [], "count": kept, "source": "profile"}


# A point read from the diagnosed epoch's trainings: GRPO groups whose completions all scored alike
# have zero advantage, so when most did, the RL data taught nothing (trainer/grpo.py counts them).
RL_NO_SIGNAL = "rl_no_signal"
RL_NO_SIGNAL_SHARE = 0.8   # trainer.grpo's warning threshold
RL_NO_SIGNAL_MIN_GROUPS = 16   # a share over fewer groups says little (cpu-small's one group per training)


def grpo_point(trainings: Sequence[Mapping]) -> dict | None:
    """The failed point `rl_no_signal` when, over the epoch's trainings (their summaries), more than
    RL_NO_SIGNAL_SHARE of at least RL_NO_SIGNAL_MIN_GROUPS GRPO groups had zero reward variance;
    None otherwise."""
    grpo = [t["grpo"] for t in trainings if (t or {}).get("grpo") and t["grpo"].get("groups")]
    groups, zero = sum(g["groups"] for g in grpo), sum(g["zero_variance_groups"] for g in grpo)
    if groups < RL_NO_SIGNAL_MIN_GROUPS or zero / groups <= RL_NO_SIGNAL_SHARE:
        return None
    return {"failed_point": "GRPO groups whose completions all scored alike: the RL data taught nothing",
            "evidence": f"{zero} of {groups} GRPO groups had zero reward variance over {len(grpo)} training(s)",
            "curation_hint": "give RL the steps near the policy's boundary (tasks neither always nor never solved) "
                             "whose reference is right",
            "family": RL_NO_SIGNAL, "task_ids": [], "count": zero, "source": "training"}


def diagnose(trajectories: Sequence[Mapping], *, history: Sequence[Mapping] = (), sampled: Sequence[Mapping] = (),
             params=None, curation_stats: Mapping | None = None, trainings: Sequence[Mapping] = ()) -> tuple[list, dict]:
    """(failed_points, signals) for one evaluation: `trajectories` are the greedy evaluation of
    the diagnosed epoch, `history` the `signals.summarize` of the evaluated epochs before it
    (oldest first), `sampled` its K sampled rollouts per task (may be empty: no boundary signal),
    `curation_stats` its curation stats (profile.json: recorded outcomes it trains on become `trained_failures`),
    `trainings` its trainings' summaries (GRPO groups without signal become `rl_no_signal`)."""
    points = failed_points(trajectories)
    for point in (outcome_point(curation_stats), grpo_point(trainings)):
        if point is not None:   # after the trajectories' points: family_counts counts those alone
            points.append(point)
    found = sig.signals(sig.summarize(trajectories), history, sampled, params or sig.SignalParams())
    return points, {"families": family_counts(points), **found}


def trade_by_category(trajectories: Sequence[Mapping], fixed: Sequence[str], broke: Sequence[str]) -> dict:
    """{category: {"fixed": n, "broke": n}} of the tasks a candidate fixed and broke, by the
    category its evaluated trajectories name (sorted; "" when a trajectory names none)."""
    category = {task_id_of(t): (t.get("meta") or {}).get("category") or "" for t in trajectories}
    out: dict = {}
    for key, tasks in (("fixed", fixed), ("broke", broke)):
        for task in tasks:
            out.setdefault(category.get(task, ""), {"fixed": 0, "broke": 0})[key] += 1
    return dict(sorted(out.items()))


def trade_text(by_category: Mapping) -> str:
    """`irrelevance +9/−2, simple_python +0/−9`: fixed/broken per category, the categories it lost first."""
    rows = sorted(by_category.items(), key=lambda kv: (kv[1]["fixed"] - kv[1]["broke"], kv[0]))
    return ", ".join(f"{name or 'uncategorised'} +{c['fixed']}/−{c['broke']}" for name, c in rows)


def rejected_lesson(trajectories: Sequence[Mapping], best: Sequence[Mapping], *, sampled: Sequence[Mapping] = (),
                    params=None) -> dict:
    """What a rolled-back candidate's evaluation teaches, against the best policy it lost to
    (`best`: that policy's trajectories): `broke`, CoEvolve's forgetting with the best's
    evaluation as the window (tasks the best solved that the candidate fails); `fixed`, its mirror;
    `by_category`, the same per task category (what the candidate traded for what); `broke_as`, the
    failure families of the candidate's failures on the broken tasks; `families`
    of all its failures; `boundary` and `rare`, its own signals (its sampled rollouts)."""
    now, before = sig.summarize(trajectories), sig.summarize(best)
    broke = sig.forgetting(now["scores"], [before["scores"]], window=1)
    on_broken = [t for t in trajectories if task_id_of(t) in set(broke)]
    found = sig.signals(now, [before], sampled, params or sig.SignalParams())
    fixed = sig.fixed(now["scores"], before["scores"])
    return {"broke": broke, "fixed": fixed, "by_category": trade_by_category(trajectories, fixed, broke),
            "broke_as": [{k: p[k] for k in ("family", "task_ids", "count", "evidence")} for p in failed_points(on_broken)],
            "families": family_counts(failed_points(trajectories)), "boundary": found["boundary"], "rare": found["rare"]}
