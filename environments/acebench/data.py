"""ACEBench's English data, shipped as published (github ACEBench/ACEBench, MIT, the commit in
data/SOURCE.json).

Layout under environments/acebench/data/ (override with `set_root` in tests):
  data_en/data_<category>.json          the items, one JSON object a line ({"id", "question",
                                        "function", and "time" / "profile" / "initial_config" ...})
                                        = the repository's data_all/data_en/
  possible_answer/data_<category>.json  {"id", "ground_truth"} a line (agent items add
                                        "mile_stone") = data_all/data_en/possible_answer/
  LICENSE.md                            ACEBench's licence, verbatim
  prompts_en.json                       the English prompt templates of model_inference/prompt_en.py
  prompts_multi_turn_en.json            the English prompts of the agent_multi_turn conversation (the
                                        agent's, the simulated user's; SOURCE.json "derived" says where)
  SOURCE.json                           {"repository", "commit", "license", "files": {path: sha256}}

Every file's sha256 is checked against SOURCE.json the first time anything is read; a missing or
altered file, or an id found in two categories, is a UserError.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from base.errors import UserError

CATEGORIES = (
    "normal_single_turn_single_function", "normal_single_turn_parallel_function",
    "normal_multi_turn_user_adjust", "normal_multi_turn_user_switch", "normal_similar_api",
    "normal_preference", "normal_atom_bool", "normal_atom_enum", "normal_atom_number",
    "normal_atom_list", "normal_atom_object_deep", "normal_atom_object_short",
    "special_incomplete", "special_error_param", "special_irrelevant",
    "agent_multi_step", "agent_multi_turn",
)
NEEDS_USER = ("agent_multi_turn",)  # scored only with an LLM playing the user

_DEFAULT_ROOT = Path(__file__).resolve().parent / "data"
_root = _DEFAULT_ROOT
_FIX = "reinstall the project or restore it with `git checkout -- environments/acebench/data`"


def set_root(path: Path | str | None) -> None:
    """Read the data from `path` (None: the shipped copy); forgets everything loaded."""
    global _root
    _root = _DEFAULT_ROOT if path is None else Path(path)
    for f in (source, _verified, items, _answers, _index, prompts, multi_turn_prompts):
        f.cache_clear()


def root() -> Path:
    return _root


@lru_cache(maxsize=None)
def source() -> dict:
    """SOURCE.json: where the data came from and each file's sha256."""
    path = _root / "SOURCE.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"ACEBench data file {path} is missing or unreadable ({exc}); {_FIX}.") from None


@lru_cache(maxsize=None)
def _verified() -> bool:
    for rel, digest in source()["files"].items():
        path = _root / rel
        try:
            got = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            raise UserError(f"ACEBench data file {path} is missing; {_FIX}.") from None
        if got != digest:
            raise UserError(f"ACEBench data file {path} does not match its sha256 in SOURCE.json "
                            f"(corrupted or edited); {_FIX}.")
    return True


def _category(category: str) -> str:
    if category not in CATEGORIES:
        raise UserError(f"Unknown ACEBench category {category!r}; known: {', '.join(CATEGORIES)}.")
    return category


def _lines(rel: str) -> list[dict]:
    _verified()
    path = _root / rel
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                raise UserError(f"ACEBench data file {path} line {n} is not JSON; {_FIX}.") from None
    return out


@lru_cache(maxsize=None)
def items(category: str) -> dict[str, dict]:
    """{id: item} of one category, in file order, items exactly as published."""
    _index()  # ids unique across categories
    return {d["id"]: d for d in _lines(f"data_en/data_{_category(category)}.json")}


@lru_cache(maxsize=None)
def _answers(category: str) -> dict[str, dict]:
    return {d["id"]: d for d in _lines(f"possible_answer/data_{_category(category)}.json")}


@lru_cache(maxsize=None)
def _index() -> dict[str, str]:
    index: dict[str, str] = {}
    for category in CATEGORIES:
        for d in _lines(f"data_en/data_{category}.json"):
            if d["id"] in index:
                raise UserError(f"ACEBench item id {d['id']!r} is in both {index[d['id']]} and {category}; {_FIX}.")
            index[d["id"]] = category
    return index


def category_of(item_id: str) -> str:
    try:
        return _index()[item_id]
    except KeyError:
        raise UserError(f"Unknown ACEBench item id {item_id!r}.") from None


def answer(item_id: str) -> dict:
    """The possible-answer record as published: {"id", "ground_truth"[, "mile_stone"]}."""
    try:
        return _answers(category_of(item_id))[item_id]
    except KeyError:
        raise UserError(f"ACEBench item {item_id!r} has no possible answer; {_FIX}.") from None


def all_ids(include_needs_user: bool = False) -> list[str]:
    return [i for i, c in _index().items() if include_needs_user or c not in NEEDS_USER]


@lru_cache(maxsize=None)
def prompts() -> dict[str, str]:
    """ACEBench's English inference prompt templates, by their names in prompt_en.py."""
    _verified()
    return json.loads((_root / "prompts_en.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def multi_turn_prompts() -> dict[str, str]:
    """ACEBench's English agent_multi_turn prompts (the agent's system and user templates, the travel and
    phone rules appended to the agent's, the user simulator's system prompts and opening line), by name."""
    _verified()
    return json.loads((_root / "prompts_multi_turn_en.json").read_text(encoding="utf-8"))
