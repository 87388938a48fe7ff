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

import ast
import copy
import importlib
import inspect
import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

# bfcl_eval creates result/score/lock folders under BFCL_PROJECT_ROOT (default: inside
# site-packages) when some of its modules are imported; point it somewhere harmless first.
os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path(tempfile.gettempdir()) / "curateevo-bfcl"))

from bfcl_eval.constants.executable_backend_config import (  # noqa: E402
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    STATELESS_CLASSES,
)

from evolver.files import read_jsonl  # noqa: E402

VERSION_PREFIX = "BFCL_v4"
ERROR_PREFIX = "Error during execution: "
MAX_CALL_CHARS = 100_000
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                         "multi_turn_long_context")

# BFCL function docs use Python-flavoured type names; OpenAI tool schemas want JSON Schema.
_TYPE_MAP = {"dict": "object", "float": "number", "tuple": "array", "int": "integer",
             "str": "string", "bool": "boolean", "list": "array"}
_DROP_TYPES = {"any"}


class CallError(ValueError):
    """A call string that is not a single literal-argument function call."""


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
# call strings


def parse_call(call_str: str) -> tuple[str, tuple, dict]:
    """`name(literal, ..., key=literal)` -> (name, positional args, keyword args).

    Raises CallError for anything else: several statements, attribute or subscript callees,
    `*args` / `**kwargs`, repeated keywords, or an argument that is not a Python literal.
    Nothing is evaluated beyond `ast.literal_eval` of each argument node."""
    if not isinstance(call_str, str):
        raise CallError("a call must be a string")
    if len(call_str) > MAX_CALL_CHARS:
        raise CallError(f"call is longer than {MAX_CALL_CHARS} characters")
    try:
        tree = ast.parse(call_str.strip(), mode="eval")
    except SyntaxError as exc:
        raise CallError(f"invalid syntax ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError):
        raise CallError("invalid syntax") from None
    node = tree.body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise CallError("expected one function call of the form name(arg=value, ...)")
    name = node.func.id
    args = []
    for i, arg in enumerate(node.args):
        if isinstance(arg, ast.Starred):
            raise CallError(f"{name}: *args are not allowed")
        args.append(_literal(arg, f"{name}: positional argument {i}"))
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise CallError(f"{name}: **kwargs are not allowed")
        if kw.arg in kwargs:
            raise CallError(f"{name}: keyword argument {kw.arg!r} repeated")
        kwargs[kw.arg] = _literal(kw.value, f"{name}: argument {kw.arg!r}")
    return name, tuple(args), kwargs


def _literal(node: ast.AST, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise CallError(f"{where} is not a literal value") from None


def format_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The python call string BFCL uses for a call with keyword arguments."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def serialize_result(result: Any) -> str:
    """An observation exactly as BFCL's executor renders a function's return value."""
    if type(result) is str:  # noqa: E721 -- BFCL tests the exact type
        return result
    if type(result) is dict:  # noqa: E721
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def _is_plain(value: Any, depth: int = 0) -> bool:
    if depth > 100:
        return False
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v, depth + 1) for k, v in value.items())
    return False


# --------------------------------------------------------------------------------------------
# episodes


def _backend_class(class_name: str) -> type:
    if class_name not in CLASS_FILE_PATH_MAPPING:
        raise KeyError(f"unknown BFCL backend class {class_name!r}")
    module = importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name])
    return getattr(module, class_name)


class Episode:
    """Fresh backends for one task; executes calls safely and exposes the state.

    `task` is a BFCL multi-turn entry (`id`, `involved_classes`, `initial_config`, optionally
    `function`). The offered functions are `functions` if given, else the names of the task's
    function docs; only those, and only when a backend instance has them as public methods,
    can be called. `long_context` defaults to what BFCL uses for the task's category.
    """

    def __init__(self, task: Mapping, *, functions: Iterable[str] | None = None,
                 long_context: bool | None = None):
        self.task_id: str = task.get("id", "")
        if long_context is None:
            category = self.task_id.rsplit("_", 1)[0]
            long_context = "long_context" in category or "composite" in category
        self.long_context = bool(long_context)
        config = task.get("initial_config") or {}
        self.instances: dict[str, Any] = {}
        for class_name in task["involved_classes"]:
            instance = _backend_class(class_name)()
            if class_name not in STATELESS_CLASSES:
                instance._load_scenario(copy.deepcopy(config.get(class_name, {})),
                                        long_context=self.long_context)
            self.instances[class_name] = instance
        if functions is None:
            docs = task.get("function") or function_docs(task["involved_classes"])
            functions = [d["name"] for d in docs]
        offered = set(functions)
        self._owner: dict[str, str] = {}
        for class_name, instance in self.instances.items():
            for name in offered:
                if name.startswith("_") or name in self._owner:
                    continue
                if inspect.isfunction(getattr(type(instance), name, None)):
                    self._owner[name] = class_name
        self.history: list[tuple[str, str]] = []  # (call as text, observation)

    @property
    def functions(self) -> frozenset[str]:
        """The names that can be called in this episode."""
        return frozenset(self._owner)

    def _method(self, name: str):
        class_name = self._owner.get(name)
        if class_name is None:
            return None
        return getattr(self.instances[class_name], name)

    def execute(self, call_str: str) -> str:
        """Run one python-syntax call string; always returns an observation string."""
        try:
            name, args, kwargs = parse_call(call_str)
        except CallError as exc:
            obs = ERROR_PREFIX + str(exc)
        else:
            obs = self._invoke(name, args, kwargs)
        self.history.append((call_str if isinstance(call_str, str) else repr(call_str), obs))
        return obs

    def execute_all(self, call_strs: Sequence[str]) -> list[str]:
        return [self.execute(c) for c in call_strs]

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Run one call given as a name and a keyword-argument mapping (e.g. decoded JSON)."""
        arguments = dict(arguments or {})
        if not isinstance(name, str) or not all(isinstance(k, str) for k in arguments) \
                or not _is_plain(arguments):
            obs = ERROR_PREFIX + "arguments must be plain JSON-like values"
            text = repr(name)
        else:
            obs = self._invoke(name, (), arguments)
            text = format_call(name, arguments)
        self.history.append((text, obs))
        return obs

    def _invoke(self, name: str, args: tuple, kwargs: dict) -> str:
        method = self._method(name)
        if method is None:
            # The message the official executor gives for a name it cannot resolve.
            return f"{ERROR_PREFIX}name '{name}' is not defined"
        try:
            result = method(*args, **kwargs)
        except Exception as exc:  # the backend's own error, as BFCL reports it
            return ERROR_PREFIX + str(exc)
        return serialize_result(result)

    def signature(self, name: str) -> inspect.Signature | None:
        """The signature of an offered function (None when `name` is not offered)."""
        method = self._method(name)
        return None if method is None else inspect.signature(method)

    def bind_arguments(self, name: str, args: Sequence = (), kwargs: Mapping | None = None) -> dict:
        """Positional and keyword arguments of a call as one keyword mapping, in signature
        order (no defaults filled in). Raises CallError when `name` is not offered or the
        arguments do not fit its signature."""
        method = self._method(name)
        if method is None:
            raise CallError(f"function {name!r} is not offered")
        try:
            bound = inspect.signature(method).bind(*args, **dict(kwargs or {}))
        except TypeError as exc:
            raise CallError(f"{name}: {exc}") from None
        return dict(bound.arguments)

    def to_tool_call(self, call_str: str) -> tuple[str, dict]:
        """A python call string as (name, keyword arguments)."""
        name, args, kwargs = parse_call(call_str)
        return name, self.bind_arguments(name, args, kwargs)

    def state(self) -> dict[str, dict[str, Any]]:
        """A deep copy of each backend's public attributes: what BFCL's state check compares."""
        return {cls: {k: copy.deepcopy(v) for k, v in vars(inst).items() if not k.startswith("_")}
                for cls, inst in self.instances.items()}

    def rng_states(self) -> dict[str, Any]:
        """The backends' private RNG states (IDs and tokens come from them)."""
        out = {}
        for cls, inst in self.instances.items():
            rng = getattr(inst, "_random", None)
            if rng is not None:
                out[cls] = rng.getstate()
        return out
