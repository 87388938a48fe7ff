"""Failure modes from LLM-written failed points, merged deterministically with no LLM call: a
point whose text clearly names one of the rule families (evolver/diagnose.py) joins that family;
the rest are clustered by word-set Jaccard similarity. The modes are shaped like the rule-based
entries of `failed_points.json`, so the loop writes both into one file.
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable, Mapping

from evolver.diagnose import FAMILIES

JACCARD = 0.5                  # unmapped points at least this similar are one failure mode
EXAMPLES = 3


# A point joins a rule family when its failed_point matches that family's pattern; the first
# match in this order wins (the more specific behaviours come first).
FAMILY_PATTERNS = {
    "misled_by_memory": r"(memory|hint)s? (that )?(nam|mention|suggest|point)\w*|misled by (the |a )?(memory|hints?)",
    "step_limit": r"step limit|max(imum)? (number of )?steps|too many steps",
    "repeated_call_loop": r"repeat|\bloop|same call|redundant call|again and again",
    "unknown_tool": r"(unknown|non-?existent|undefined|invented|hallucinated|unavailable|not offered|not available)"
                    r" (tool|function|api)|(tool|function) (that|which) (is|was) not (offered|available|defined)",
    "tool_error_not_recovered": r"recover|retry|error handling|after (an |the )?error|(ignor|misread)\w* (the |an )?error",
    "premature_stop": r"prematur|stopp?(ed|ing)? (too )?early|gave up|give up|abandon|before (finishing|completing)"
                      r"|did not (finish|complete|continue)",
    "empty_turn": r"empty (turn|response|reply|answer)|no (response|reply|answer) (at all|for)",
    "unwanted_call": r"unnecessary (tool )?calls?|unwanted|should not (have )?call|irrelevan|no (tool )?call was (needed|wanted)",
    "missing_call": r"(without|no) (a |any )?(tool |function )?calls?\b|answered in (plain )?text|instead of calling"
                    r"|did not (make|issue|emit) (a |any )?(tool |function )?call",
    "wrong_call_count": r"too (many|few) (tool |function )?calls|wrong number of calls|(number|count) of calls|parallel calls",
    "wrong_tool": r"(wrong|incorrect|different) (tool|function)|(tool|function) (choice|selection)",
    "unparseable_call": r"malformed|unparseable|pars(e|ing)|syntax|(call|output) format|well-formed|invalid json",
    "bad_arguments": r"argument|parameter|\bargs?\b|mistyped|missing required|wrong (type|value)",
    "state_mismatch": r"\bstate\b|stale|wrong (active )?(object|directory|file|id)",
    "missing_output": r"report|missing (information|output|result)|final (answer|reply)|summar",
    "unclassified": r"\bunclassified\b",
}
_FAMILY_RE = {f: re.compile(p, re.I) for f, p in FAMILY_PATTERNS.items()}
assert set(FAMILY_PATTERNS) == set(FAMILIES), "every rule family has a pattern"
STOPWORDS = frozenset("a an the of to in on for and or with without by from at as is are was were be been "
                      "not no it its this that these those agent model when which what does did do".split())


def words(text: str) -> list[str]:
    """Content words, lower case, a plural s removed, in order of first appearance."""
    out = []
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        if w not in STOPWORDS and w not in out:
            out.append(w)
    return out


def family_of(point: Mapping) -> str | None:
    """The rule family whose pattern the point's failed_point matches first, if any."""
    return next((f for f, pattern in _FAMILY_RE.items() if pattern.search(point["failed_point"])), None)


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def _sort_key(item: tuple) -> tuple:
    traj, task, point = item
    return (point["failed_point"], point["evidence"], point["curation_hint"], task, traj)


def _clusters(items: list[tuple]) -> list[list[tuple]]:
    """Connected components of 'word-set Jaccard ≥ JACCARD' among the points' failed_point texts."""
    items = sorted(items, key=_sort_key)
    sets = [set(words(p["failed_point"])) for _, _, p in items]
    parent = list(range(len(items)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            if _jaccard(sets[i], sets[j]) >= JACCARD:
                parent[root(j)] = root(i)
    groups: dict[int, list] = defaultdict(list)
    for i, item in enumerate(items):
        groups[root(i)].append(item)
    return list(groups.values())


def _representative(items: list[tuple]) -> tuple:
    """The point most similar to the others (ties: the first by text)."""
    items = sorted(items, key=_sort_key)
    sets = [set(words(p["failed_point"])) for _, _, p in items]
    score = [sum(_jaccard(w, v) for v in sets) for w in sets]
    return items[max(range(len(items)), key=lambda i: (score[i], -i))]


def _mode(family: str, items: list[tuple]) -> dict:
    _, _, rep = _representative(items)
    # a few original points: different wordings from different tasks first
    examples: list[dict] = []
    candidates = [{"task_id": task, **p} for _, task, p in sorted(items, key=lambda x: (x[1], _sort_key(x)))]
    for new_text, new_task in ((True, True), (True, False), (False, False)):
        for e in candidates:
            if len(examples) < EXAMPLES and e not in examples \
                    and not (new_text and any(x["failed_point"] == e["failed_point"] for x in examples)) \
                    and not (new_task and any(x["task_id"] == e["task_id"] for x in examples)):
                examples.append(e)
    return {"failed_point": rep["failed_point"], "evidence": rep["evidence"], "curation_hint": rep["curation_hint"],
            "family": family, "task_ids": sorted({task for _, task, _ in items}),
            "count": len({traj for traj, _, _ in items}), "source": "llm", "examples": examples}


def merge(diagnosed: Iterable[tuple[str, str, Mapping]]) -> list[dict]:
    """Recurring failure modes of (trajectory id, task id, point) triples, sorted by (-count, family)."""
    groups: dict[str, list] = defaultdict(list)
    unmapped = []
    for traj, task, point in diagnosed:
        item = (str(traj), str(task), dict(point))
        family = family_of(point)
        (groups[family] if family else unmapped).append(item)
    for cluster in _clusters(unmapped):
        _, _, rep = _representative(cluster)
        # two clusters whose representatives open with the same four words share a mode
        groups["llm:" + ("-".join(words(rep["failed_point"])[:4]) or "other")].extend(cluster)
    return sorted((_mode(f, items) for f, items in groups.items()), key=lambda m: (-m["count"], m["family"]))
