"""The BFCL-V4 single-turn categories and their data as bfcl-eval ships it: the entries of a
category (file order) and its possible answers. Read by the benchmark (single_turn.py) and by the
splits generator (splits.py)."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources

from base.errors import UserError
from base.files import read_jsonl

SINGLE_TURN_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
LIVE_CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
                   "live_irrelevance", "live_relevance")
CATEGORIES = SINGLE_TURN_CATEGORIES + LIVE_CATEGORIES
NO_ANSWER = ("irrelevance", "live_irrelevance", "live_relevance")  # no possible_answer file
NO_CALL = ("irrelevance", "live_irrelevance")   # the right answer is no call: the model must decline


def _data():
    return resources.files("bfcl_eval") / "data"


@lru_cache(maxsize=None)
def load_category(category: str) -> tuple[dict, ...]:
    """The entries of a single-turn category (file order), unsatisfiable ones included."""
    if category not in CATEGORIES:
        raise UserError(f"unknown bfcl-single category {category!r} (one of {', '.join(CATEGORIES)})")
    return tuple(read_jsonl(_data() / f"BFCL_v4_{category}.json"))


@lru_cache(maxsize=None)
def entries(category: str) -> dict[str, dict]:
    return {e["id"]: e for e in load_category(category)}


@lru_cache(maxsize=None)
def answers(category: str) -> dict[str, list]:
    if category in NO_ANSWER:
        return {}
    return {r["id"]: r["ground_truth"] for r in read_jsonl(_data() / "possible_answer" / f"BFCL_v4_{category}.json")}


def category_of(task_id: str) -> str:
    head = task_id.rsplit("_", 1)[0]
    if head not in CATEGORIES:
        raise UserError(f"not a bfcl-single task id: {task_id!r}")
    return head
