"""Safe execution of BFCL-V4 multi-turn function calls on fresh backend instances.

The official executor (`bfcl_eval...multi_turn_utils.execute_multi_turn_func_call`) runs model
text through `eval()` and keeps backend instances in module globals forever (shared/FIELD-NOTES.md).
This module does neither:

- an `Episode(task)` builds its own backend instances, directly from the classes in
  `bfcl_eval/eval_checker/multi_turn_eval/func_source_code/`, loaded the way BFCL loads them
  (`_load_scenario(deepcopy(initial_config[cls]), long_context=...)`; MathAPI is stateless);
  nothing is cached between episodes;
- a call string is parsed with `ast`; only a plain `name(literal, ..., key=literal, ...)` is
  accepted, every argument goes through `ast.literal_eval`, and the call is dispatched to the
  bound public method of the instance that owns `name`, and only when the task offers `name`;
- anything else (unknown function, bad syntax, non-literal argument) comes back as an error
  observation string and nothing runs.

Results are serialised as BFCL serialises observations: a `str` as is, a `dict` as
`json.dumps` (falling back to `str`), anything else as `str`; an exception as
`"Error during execution: <message>"`. Observations therefore match the official executor's
for the same calls.
"""
from __future__ import annotations

import copy
import importlib
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

# bfcl_eval creates result/score/lock folders under BFCL_PROJECT_ROOT (default: inside
# site-packages) when some of its modules are imported; point it somewhere harmless first.
os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path(tempfile.gettempdir()) / "curateevo-bfcl"))

from bfcl_eval.constants.executable_backend_config import (  # noqa: E402
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    STATELESS_CLASSES,
)

from base.files import read_jsonl  # noqa: E402
from sandbox.simenv.calls import (  # noqa: E402,F401  (re-exported: the benchmark's call-string API)
    ERROR_PREFIX,
    MAX_CALL_CHARS,
    CallError,
    format_call,
    parse_call,
    serialize_result,
)
from sandbox.simenv.episode import Episode as SafeEpisode  # noqa: E402

VERSION_PREFIX = "BFCL_v4"
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                         "multi_turn_long_context")

# BFCL function docs use Python-flavoured type names; OpenAI tool schemas want JSON Schema.
_TYPE_MAP = {"dict": "object", "float": "number", "tuple": "array", "int": "integer",
             "str": "string", "bool": "boolean", "list": "array"}
_DROP_TYPES = {"any"}


# --------------------------------------------------------------------------------------------
# data


def _data_dir():
    return resources.files("bfcl_eval") / "data"


def task_number(task_id: str) -> int:
    """The trailing number of a BFCL id (`multi_turn_base_157` -> 157)."""
    return int(task_id.rsplit("_", 1)[1])


def function_docs(classes: Iterable[str]) -> list[dict]:
    """BFCL's multi-turn function docs for `classes`, in class order then file order."""
    docs: list[dict] = []
    for name in classes:
        if name not in MULTI_TURN_FUNC_DOC_FILE_MAPPING:
            raise KeyError(f"unknown BFCL backend class {name!r}")
        docs.extend(read_jsonl(_data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[name]))
    return docs


def load_tasks(category: str = "multi_turn_base") -> dict[str, dict]:
    """The entries of a multi-turn category by id (in numeric order), each with its function
    docs attached under "function" as `bfcl_eval.utils.load_dataset_entry` does (without the
    language hint; for miss_func the held-out docs move to "missed_function" by turn)."""
    if category not in MULTI_TURN_CATEGORIES:
        raise ValueError(f"not a multi-turn category: {category!r}")
    entries = read_jsonl(_data_dir() / f"{VERSION_PREFIX}_{category}.json")
    out: dict[str, dict] = {}
    for entry in sorted(entries, key=lambda e: task_number(e["id"])):
        docs = function_docs(entry["involved_classes"])
        if "missed_function" in entry:
            held = {}
            for turn, names in entry["missed_function"].items():
                held[turn] = [d for d in docs if d["name"] in names]
                docs = [d for d in docs if d["name"] not in names]
            entry["missed_function"] = held
        entry["function"] = docs
        out[entry["id"]] = entry
    return out


def load_ground_truth(category: str = "multi_turn_base") -> dict[str, list[list[str]]]:
    """Ground truth by id: per user turn, a list of python call strings."""
    if category not in MULTI_TURN_CATEGORIES:
        raise ValueError(f"not a multi-turn category: {category!r}")
    rows = read_jsonl(_data_dir() / "possible_answer" / f"{VERSION_PREFIX}_{category}.json")
    return {row["id"]: row["ground_truth"] for row in rows}


# --------------------------------------------------------------------------------------------
# tool schemas


def _convert_schema(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            if isinstance(value, str):
                if value in _DROP_TYPES:
                    continue
                out[key] = _TYPE_MAP.get(value, value)
            elif isinstance(value, list):
                kept = [_TYPE_MAP.get(v, v) for v in value if v not in _DROP_TYPES]
                if kept:
                    out[key] = kept
            else:
                out[key] = value
        elif key == "properties" and isinstance(value, Mapping):
            out[key] = {name: _convert_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _convert_schema(value) if isinstance(value, Mapping) else value
        else:
            out[key] = copy.deepcopy(value)
    return out


def tool_schema(doc: Mapping) -> dict:
    """One BFCL function doc as an OpenAI tool schema (the `response` part is dropped)."""
    params = _convert_schema(doc.get("parameters") or {"type": "dict", "properties": {}})
    return {"type": "function",
            "function": {"name": doc["name"], "description": doc.get("description", ""), "parameters": params}}


def tool_schemas(task: Mapping, functions: Iterable[str] | None = None) -> list[dict]:
    """The task's function docs (its "function" list, else the docs of its involved classes)
    as OpenAI tool schemas, optionally restricted to the names in `functions`."""
    docs = task.get("function") or function_docs(task["involved_classes"])
    keep = None if functions is None else set(functions)
    return [tool_schema(d) for d in docs if keep is None or d["name"] in keep]


# --------------------------------------------------------------------------------------------
# episodes


def _backend_class(class_name: str) -> type:
    if class_name not in CLASS_FILE_PATH_MAPPING:
        raise KeyError(f"unknown BFCL backend class {class_name!r}")
    module = importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name])
    return getattr(module, class_name)


class Episode(SafeEpisode):
    """Fresh backends for one task (sandbox/simenv/episode.py), with the classes of the installed
    bfcl_eval. The offered functions are `functions` if given, else the names of the task's
    function docs (its "function" list, else the docs of its involved classes)."""

    def __init__(self, task: Mapping, *, functions: Iterable[str] | None = None,
                 long_context: bool | None = None):
        if functions is None:
            docs = task.get("function") or function_docs(task["involved_classes"])
            functions = [d["name"] for d in docs]
        super().__init__(task, functions, _backend_class, STATELESS_CLASSES, long_context=long_context)
