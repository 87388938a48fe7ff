"""BFCL-V4's rows for the leakage guard (sandbox/leakage.py): every task's user requests and gold
calls, with its split.

- multi-turn: the text of every turn's user messages; the ground-truth calls of all its turns in
  order (a sequence), positional arguments bound to their parameter names by the backend's
  signature;
- single-turn: the question's user messages; the gold calls of the task's possible answer (one
  assistant message's set of calls).
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Iterator

from base.environment import GoldRow
from sandbox.leakage import call_key


def _bound(call_str: str, classes: list) -> str:
    from environments.bfcl.backends import _backend_class, parse_call

    name, args, kwargs = parse_call(call_str)
    if args:   # few ground-truth calls are positional; binding them needs the backend's signature
        for cls in classes:
            method = getattr(_backend_class(cls), name, None)
            if method is not None:
                bound = inspect.signature(method).bind(None, *args, **kwargs).arguments
                kwargs = {k: v for k, v in bound.items() if k != "self"}
                break
    return call_key(name, kwargs)


def _user_texts(question) -> list[str]:
    return [m["content"] for turn in question for m in turn if m.get("role") == "user" and isinstance(m.get("content"), str)]


def key() -> bytes:
    """What the rows depend on: this module's source, the splits file and the bfcl-eval version."""
    from environments.bfcl import splits

    return Path(__file__).read_bytes() + splits.SPLITS_PATH.read_bytes() + splits.describe()["bfcl_eval"].encode()


def multi_turn_rows() -> Iterator[GoldRow]:
    from base.files import read_jsonl
    from environments.bfcl import backends, splits
    from environments.bfcl.multi_turn import VARIANTS, _category_truth, category_of, parse_task_id

    split_of_number = {n: s for s in ("train", "dev", "test") for n in splits.multi_turn_split(s)}
    for variant in VARIANTS:
        truth = _category_truth(variant)
        # the question files alone: load_tasks would attach function docs this guard never reads
        for entry in read_jsonl(backends._data_dir() / f"{backends.VERSION_PREFIX}_{category_of(variant)}.json"):
            tid = entry["id"]
            calls = tuple(_bound(c, entry["involved_classes"]) for turn in truth.get(tid, []) for c in turn)
            yield GoldRow(split_of_number[parse_task_id(tid)[1]], tid, _user_texts(entry["question"]), calls, True)


def single_turn_rows() -> Iterator[GoldRow]:
    from environments.bfcl import splits
    from environments.bfcl.single_turn import gold_calls
    from environments.bfcl.single_turn_data import answers, entries

    doc = splits.load()["bfcl-single"]
    for category in (*splits.SINGLE_TURN_CATEGORIES, *splits.LIVE_CATEGORIES):
        gold = answers(category)
        split_of_id = {i: s for s, ids in doc["categories"][category].items() for i in ids}
        for tid, entry in entries(category).items():
            if tid not in split_of_id:
                continue
            answer = gold.get(tid)
            calls = tuple(call_key(n, a) for n, a in gold_calls(entry["function"], answer)) if answer else ()
            yield GoldRow(split_of_id[tid], tid, _user_texts(entry["question"]), calls, False)
