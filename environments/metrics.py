"""Evaluation metrics (DESIGN: Objective and acceptance) from the runner's records.

- `task_success`: share of episodes the benchmark's checker passes (y), the paper's metric;
- `turn_pass`: share of user turns whose check passes, over all turns of all episodes;
- `step_accuracy`: share of right next actions given the gold prefix (mean over samples), also
  split into items whose gold makes calls and items whose gold is a plain reply;
- `call_f1`: call-level F1 over the step items of a benchmark that judges calls one by one (next-call),
  with `call_precision`, `call_recall`, `no_call_fp_rate` and the counts beside it, and per tool
  (environments/next_call/scoring.py) — P on the next-call benchmark;
- `format_error_rate`: share of policy answers that are not parseable (episodes and steps);
- `call_rate`: share of policy answers that make at least one well-formed call;
- `episodes_per_minute`, `items_per_minute`: throughput (timing; the only non-deterministic part).

Every function returns None when it has nothing to average, never 0 by default, so "not
measured" and "measured zero" stay apart. Everything but `timing` is a pure function of the
records, so equal records give byte-equal metrics.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

from environments.next_call import scoring as next_call_scoring

METRICS = ("task_success", "turn_pass", "step_accuracy", "call_f1")


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(x, digits)


def task_success(trajectories: Sequence[Mapping]) -> float | None:
    return _mean([1.0 if (t.get("outcome") or {}).get("success") else 0.0 for t in trajectories])


def mean_reward(trajectories: Sequence[Mapping]) -> float | None:
    return _mean([float((t.get("outcome") or {}).get("reward") or 0.0) for t in trajectories])


def turn_counts(trajectories: Sequence[Mapping]) -> tuple[int, int]:
    """(passing turns, turns) over all episodes."""
    passed = total = 0
    for t in trajectories:
        turns = (t.get("meta") or {}).get("turn_pass") or []
        passed += sum(1 for x in turns if x)
        total += len(turns)
    return passed, total


def turn_pass(trajectories: Sequence[Mapping]) -> float | None:
    passed, total = turn_counts(trajectories)
    return passed / total if total else None


def step_accuracy(steps: Sequence[Mapping]) -> float | None:
    return _mean([float(s["correct"]) for s in steps])


def step_accuracy_split(steps: Sequence[Mapping]) -> tuple[float | None, float | None]:
    """(accuracy on items whose gold action makes calls, on items whose gold is a plain reply).
    The second is what a policy that never calls gets; on BFCL multi-turn a third or more of
    the items close a turn, so read `step_accuracy` against it."""
    calls = [float(s["correct"]) for s in steps if s.get("gold")]
    replies = [float(s["correct"]) for s in steps if not s.get("gold")]
    return _mean(calls), _mean(replies)


def answer_counts(trajectories: Sequence[Mapping], steps: Sequence[Mapping]) -> dict:
    """Policy answers, format errors and answers with calls, over episodes and step items."""
    generations = errors = with_calls = 0
    for t in trajectories:
        meta = t.get("meta") or {}
        generations += meta.get("generations", 0)
        errors += len(meta.get("format_errors") or [])
        with_calls += sum(1 for m in t.get("messages", []) if m.get("role") == "assistant" and m.get("tool_calls"))
    episode_answers, episode_errors = generations, errors
    for s in steps:
        for sample in s["samples"]:
            generations += 1
            errors += sample["format_error"] is not None
            with_calls += bool(sample["calls"])
    return {"answers": generations, "format_errors": errors, "answers_with_calls": with_calls,
            "episode_answers": episode_answers, "episode_format_errors": episode_errors}


CALL_FIELDS = ("call_f1", "call_precision", "call_recall", "no_call_fp_rate")


def call_block(steps: Sequence[Mapping]) -> dict:
    """The call-level fields of a block: None (and no counts) when no step was judged call by call."""
    found = next_call_scoring.call_metrics(steps)
    if found is None:
        return dict.fromkeys(CALL_FIELDS)
    return {k: _round(v) if k in CALL_FIELDS else v for k, v in found.items()}


def _block(trajectories: Sequence[Mapping], steps: Sequence[Mapping]) -> dict:
    passed, turns = turn_counts(trajectories)
    counts = answer_counts(trajectories, steps)
    answers = counts["answers"]
    return {
        **call_block(steps),
        "task_success": _round(task_success(trajectories)),
        "turn_pass": _round(passed / turns if turns else None),
        "step_accuracy": _round(step_accuracy(steps)),
        "step_accuracy_calls": _round(step_accuracy_split(steps)[0]),
        "step_accuracy_replies": _round(step_accuracy_split(steps)[1]),
        "step_items_with_calls": sum(1 for s in steps if s.get("gold")),
        "mean_reward": _round(mean_reward(trajectories)),
        "format_error_rate": _round(counts["format_errors"] / answers if answers else None),
        "call_rate": _round(counts["answers_with_calls"] / answers if answers else None),
        "episodes": len(trajectories),
        "successes": sum(1 for t in trajectories if (t.get("outcome") or {}).get("success")),
        "turns": turns,
        "turns_passed": passed,
        "step_items": len(steps),
        "step_samples": sum(len(s["samples"]) for s in steps),
        **counts,
    }


def summarize(trajectories: Sequence[Mapping], steps: Sequence[Mapping], timing: Mapping | None = None) -> dict:
    """{"metrics": overall block, "per_category": {category: block}, "per_tool" (when steps were
    judged call by call): {tool: counts and scores}, "timing": {...}}."""
    by_cat_t: dict[str, list] = defaultdict(list)
    by_cat_s: dict[str, list] = defaultdict(list)
    for t in trajectories:
        by_cat_t[(t.get("meta") or {}).get("category", "")].append(t)
    for s in steps:
        by_cat_s[s.get("category", "")].append(s)
    categories = sorted(set(by_cat_t) | set(by_cat_s))
    out = {"metrics": _block(trajectories, steps),
           "per_category": {c: _block(by_cat_t.get(c, []), by_cat_s.get(c, [])) for c in categories}}
    tools = next_call_scoring.per_tool(steps)
    if tools:
        out["per_tool"] = tools
    if timing is not None:
        out["timing"] = throughput(len(trajectories), len(steps), timing)
    return out


def throughput(episodes: int, items: int, timing: Mapping) -> dict:
    out = {k: round(float(v), 3) for k, v in timing.items()}
    ep_s, st_s = timing.get("episodes_s"), timing.get("steps_s")
    out["episodes_per_minute"] = round(60.0 * episodes / ep_s, 3) if ep_s and episodes else None
    out["items_per_minute"] = round(60.0 * items / st_s, 3) if st_s and items else None
    return out


# Below this many scored items a dev set cannot tell strategies apart: one item moves P by over
# 3 points and the 95% interval of P at 0.5 is wider than ±0.18 (0.98/√n).
MIN_DEV_ITEMS = 30


def resolution_warning(items: int, what: str = "step items") -> str | None:
    """One sentence when `items` scored items are too few to tell strategies apart (else None)."""
    if items >= MIN_DEV_ITEMS:
        return None
    if items <= 0:
        return f"the dev set holds no {what}: P cannot be measured"
    return (f"the dev set holds {items} {what}: P moves in steps of {1 / items:.3f} and its 95% interval is "
            f"about ±{min(0.5, 0.98 / items ** 0.5):.2f}, so differences between strategies below that are "
            "noise and a candidate is accepted on a lower C alone when P ties; a corpus with more "
            f"held-out tool-calling records (at least {MIN_DEV_ITEMS} items) can tell them apart")
