"""How the next-call benchmark scores a next action: call by call, so that only tool use counts.

Each held-out step (environments/next_call/benchmark.py) is a *call step* (the recorded assistant
message makes tool calls) or a *text step* (it answers in text). A model's answer there gets

- **counts** over calls: a call is a *true positive* when the recorded step makes the same call —
  equal name and equal arguments after normalisation (`normalize_arguments`: JSON-decoded, object
  key order ignored, numbers compared by value, booleans kept apart from numbers, strings exact),
  each recorded call matched at most once; any other call the model makes is a *false positive*
  (at a text step every call is one); a recorded call the model does not make is a *false
  negative*. The calls of one step are issued together, so they are compared as a multiset (their
  order within the step does not matter); the order of steps does, because each step is scored
  on its own, given the recorded messages before it. An unparseable answer makes no call.
- **a verdict** naming what went wrong, first rule that applies: `right`; `unparseable_call`
  (the answer looked like a call but could not be read); at a call step `missing_call` (text
  instead), `unknown_tool` (a called name is not on offer), `bad_arguments` (the same names as
  the recorded calls, some argument differs), `wrong_call_count` (the right tools, too many or
  too few calls), else `wrong_tool`; at a text step `unwanted_call`. These are the failure
  families of the rule diagnosis (evolver/diagnose.py).

`call_f1` = 2·TP / (2·TP + FP + FN) over all steps (micro), reported with `call_precision`
TP/(TP+FP), `call_recall` TP/(TP+FN) and `no_call_fp_rate` (share of text-step answers that call
a tool). A text step adds to the score only through such an unwanted call, so a model that never
calls, or writes noise, scores 0; per tool the same counts by name (`per_tool`).

`episodes` turns the scored steps into one record per held-out trajectory for
`trajectories.jsonl`: the recorded messages, and in `meta.steps` the model's answer at each scored
step with its verdict and why — what `report` and the diagnoses read.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any, Mapping, Sequence

VERDICTS = ("right", "unparseable_call", "missing_call", "unknown_tool", "bad_arguments", "wrong_call_count",
            "wrong_tool", "unwanted_call")
REPLY_CHARS = 400   # of the model's answer kept in an episode's step


def normalize_arguments(arguments: Any) -> Any:
    """Arguments as compared: a JSON string is decoded first; see the module docstring."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ("unparsed", arguments)
    return _norm(arguments)


def _norm(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return ("number", float(value))
    if isinstance(value, Mapping):
        return ("object", tuple(sorted((str(k), _norm(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("array", tuple(_norm(v) for v in value))
    return ("other", repr(value))


def _fn(call: Mapping) -> Mapping:
    return call.get("function", call)


def call_key(call: Mapping) -> str:
    """(name, normalised arguments) of a call, as a string: equal keys are equal calls."""
    fn = _fn(call)
    return repr((fn.get("name"), normalize_arguments(fn.get("arguments", {}))))


def same_calls(calls: Sequence[Mapping], gold: Sequence[Mapping]) -> bool:
    """Equal multisets of (name, normalised arguments)."""
    return Counter(map(call_key, calls)) == Counter(map(call_key, gold))


def _shown(call: Mapping) -> str:
    fn = _fn(call)
    args = fn.get("arguments", {})
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, sort_keys=True)
    return f"{fn.get('name')}({text})"


def _listed(calls: Sequence[Mapping]) -> str:
    return ", ".join(_shown(c) for c in calls)


def _argument_difference(call: Mapping, gold: Mapping) -> str:
    """Which arguments of `call` differ from the recorded `gold` call of the same name."""
    got, want = normalize_arguments(_fn(call).get("arguments", {})), normalize_arguments(_fn(gold).get("arguments", {}))
    if got[0] != "object" or want[0] != "object":
        return "the arguments are not an object"
    got, want = dict(got[1]), dict(want[1])
    parts = [f"missing {', '.join(sorted(set(want) - set(got)))}" if set(want) - set(got) else "",
             f"unexpected {', '.join(sorted(set(got) - set(want)))}" if set(got) - set(want) else "",
             ", ".join(f"{k} differs" for k in sorted(set(got) & set(want)) if got[k] != want[k])]
    return "; ".join(p for p in parts if p) or "the arguments differ"


def judge_calls(gold: Sequence[Mapping], calls: Sequence[Mapping], format_error: str | None,
                offered: Sequence[str]) -> dict:
    """{verdict, why, tp, fp, fn} of one answer (its parsed `calls`, or its `format_error`) at a
    step whose recorded calls are `gold` ([] for a text step); `offered`: the tool names on offer."""
    calls = [] if format_error else list(calls)
    matched = sum((Counter(map(call_key, calls)) & Counter(map(call_key, gold))).values())
    counts = {"tp": matched, "fp": len(calls) - matched, "fn": len(gold) - matched}

    def verdict(name: str, why: str) -> dict:
        return {"verdict": name, "why": why, **counts}

    recorded = f"the recorded step calls {_listed(gold)}" if gold else "the recorded step answers in text"
    if format_error:
        return verdict("unparseable_call", f"{recorded}; the answer could not be read as calls: {format_error}")
    if same_calls(calls, gold):
        return verdict("right", recorded)
    if not gold:
        return verdict("unwanted_call", f"{recorded}; the model called {_listed(calls)}")
    if not calls:
        return verdict("missing_call", f"{recorded}; the model answered in text")
    unknown = sorted({_fn(c).get("name") for c in calls} - set(offered), key=str)
    if unknown:
        return verdict("unknown_tool", f"{recorded}; the model called {', '.join(map(str, unknown))}, "
                                       "which is not on offer")
    names, gold_names = Counter(_fn(c).get("name") for c in calls), Counter(_fn(c).get("name") for c in gold)
    if names == gold_names:
        pairs = [(c, g) for c in calls for g in gold if _fn(c).get("name") == _fn(g).get("name")
                 and call_key(c) != call_key(g)]
        call, want = pairs[0]
        return verdict("bad_arguments", f"{recorded}; the model called {_shown(call)}: "
                                        f"{_argument_difference(call, want)}")
    if set(names) == set(gold_names):
        return verdict("wrong_call_count", f"{recorded}; the model made {sum(names.values())} calls: {_listed(calls)}")
    return verdict("wrong_tool", f"{recorded}; the model called {_listed(calls)}")


def _judged(steps: Sequence[Mapping]) -> list[tuple[Mapping, Mapping]]:
    return [(s, r) for s in steps for r in s.get("samples") or () if "tp" in r]


def _scores(tp: int, fp: int, fn: int) -> dict:
    return {"f1": 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else None,
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None}


def call_metrics(steps: Sequence[Mapping]) -> dict | None:
    """call_f1, call_precision, call_recall, no_call_fp_rate and their counts over the answers of
    `steps` (runner step rows) that were judged call by call; None when none was."""
    judged = _judged(steps)
    if not judged:
        return None
    tp, fp, fn = (sum(r[k] for _, r in judged) for k in ("tp", "fp", "fn"))
    text = [r for s, r in judged if not s.get("gold")]
    unwanted = sum(1 for r in text if r["calls"])
    scores = _scores(tp, fp, fn)
    return {"call_f1": scores["f1"], "call_precision": scores["precision"], "call_recall": scores["recall"],
            "no_call_fp_rate": unwanted / len(text) if text else None,
            "call_tp": tp, "call_fp": fp, "call_fn": fn, "text_step_answers": len(text),
            "text_step_answers_with_calls": unwanted,
            "verdicts": dict(sorted(Counter(r["verdict"] for _, r in judged).items()))}


def per_tool(steps: Sequence[Mapping], digits: int = 6) -> dict:
    """{tool name: {recorded, called, tp, fp, fn, f1, precision, recall}} over the judged answers,
    by the name of the recorded or the called tool."""
    table: dict[str, Counter] = defaultdict(Counter)
    for s, r in _judged(steps):
        gold, calls = Counter(map(call_key, s["gold"])), Counter(map(call_key, r["calls"]))
        names = {call_key(c): _fn(c).get("name") for c in (*s["gold"], *r["calls"])}
        for key, n in gold.items():
            table[str(names[key])].update(recorded=n, tp=min(n, calls[key]), fn=n - min(n, calls[key]))
        for key, n in calls.items():
            table[str(names[key])].update(called=n, fp=n - min(n, gold[key]))
    out = {}
    for name, c in sorted(table.items()):
        scores = {k: None if v is None else round(v, digits) for k, v in _scores(c["tp"], c["fp"], c["fn"]).items()}
        out[name] = {k: c[k] for k in ("recorded", "called", "tp", "fp", "fn")} | scores
    return out


def episodes(records: Mapping[str, Mapping], items: Sequence, steps: Sequence[Mapping],
             categories: Mapping[str, str]) -> list[dict]:
    """One trajectory record per held-out record with scored steps, in step order: the recorded
    `messages` and `tools`; `outcome` success when every answer was right, reward the record's
    call F1 (1.0 when it neither needed nor made a call); `meta.steps` one entry per answer
    {step, sample, message_index, turn, gold, reply, calls, verdict, why}; `meta.feedback` the
    first wrong answer's verdict as `error_type` "next-call:<verdict>" and its why."""
    where = {(i.task_id, i.index): i.meta for i in items}
    by_task: dict[str, list] = defaultdict(list)
    for s in steps:
        by_task[s["task_id"]].append(s)
    out = []
    for task_id, rows in by_task.items():
        record = records[task_id]
        answers = []
        for s in rows:
            meta = where.get((task_id, s["index"]), {})
            for k, r in enumerate(s["samples"]):
                answers.append({"step": s["index"], "sample": k, "message_index": meta.get("message_index"),
                                "turn": meta.get("turn"), "gold": s["gold"], "reply": r["output"][:REPLY_CHARS],
                                "calls": r["calls"], "verdict": r.get("verdict"), "why": r.get("why")})
        wrong = [a for a in answers if a["verdict"] != "right"]
        tp, fp, fn = (sum(r.get(k, 0) for s in rows for r in s["samples"]) for k in ("tp", "fp", "fn"))
        f1 = _scores(tp, fp, fn)["f1"]
        feedback = {"error_type": f"next-call:{wrong[0]['verdict']}", "checker_message": wrong[0]["why"]} if wrong else {}
        first_user = next((m.get("content") for m in record["messages"] if m.get("role") == "user"), "")
        out.append({
            "id": task_id, "source": record.get("source") or "next-call", "task": record.get("task") or first_user or "",
            "tools": list(record.get("tools") or []), "messages": list(record["messages"]),
            "outcome": {"success": not wrong, "reward": 1.0 if f1 is None else round(f1, 6)},
            "meta": {"benchmark": "next-call", "task_id": task_id, "category": categories.get(task_id, ""), "sample": 0,
                     "steps": answers, "feedback": feedback, "format_errors": [], "turn_pass": [],
                     "generations": len(answers), "calls": sum(len(a["calls"]) for a in answers), "memory": []}})
    return out
