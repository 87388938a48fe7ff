"""Python-syntax call strings, read safely: `ast` parsing, `ast.literal_eval` per argument.

Shared by the benchmark's executor (environments/bfcl/backends.py) and the sandbox's simulated
environment (sandbox/simenv/environment.py), so a strategy's call runs exactly as an evaluated one.
"""
from __future__ import annotations

import ast
import json
from typing import Any, Mapping

ERROR_PREFIX = "Error during execution: "
MAX_CALL_CHARS = 100_000


class CallError(ValueError):
    """A call string that is not a single literal-argument function call."""


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


def is_plain(value: Any, depth: int = 0) -> bool:
    """Only JSON-like values (None, bool, int, float, str, lists, str-keyed dicts), not too deep."""
    if depth > 100:
        return False
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(is_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v, depth + 1) for k, v in value.items())
    return False
