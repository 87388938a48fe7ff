"""ACEBench's answer checker for the normal_* and special_* categories, written here to give the
same verdicts as the official `eval_main.py` + `model_eval/checker.py` of github ACEBench/ACEBench
at e6db74b735ead22c24f27367606a9408573b848f (MIT; data/SOURCE.json). Agreement is pinned by
tests/fixtures/acebench/official_verdicts.jsonl (verdicts produced by running the official code).

Rules reproduced (quirks included, because the published scores were computed with them):
- Parsing: every whitespace character is removed from the answer, then it is parsed as one Python
  expression that must be a list/tuple/set of calls `Name(key=value, ...)`; positional arguments
  are dropped, a bare name is the string of its name, `-x`/`+x`/`~x` of a number all give -x, an
  arithmetic expression is evaluated, `a[b]` becomes the string "a[b]".
- Normal: the number of calls, then the multiset of function names (a trailing `_<n>` of a
  ground-truth key removed) must match; each expected call passes if some call of that name passes:
  its function description is the first one whose name is a *substring* of the expected key; every
  `required` parameter present; no parameter that is undocumented or absent from the ground truth;
  type checks by the schema's type name (an `enum` string, a number or a boolean has its type, never
  its value, checked); strings match after `standardize` by containment; lists by equality after
  `standardize` of their strings; objects key by key (str(expected) contained in str(value)). An
  item with several possible answers passes if any does.
- Special: phrase rules on the raw text ("Missing necessary parameters" + the API name + each
  missing parameter; "There is incorrect value" + each wrong value; "the limitations of the
  function").
Where the official code would crash (no verdict), `check` says invalid, "official_checker_error".
Also here: `calls_to_text` (calls in the syntax the parser reads) and ACEBench's English inference
prompts (`system_prompt`, `user_prompt`, the SYSTEM_PROMPT_* templates, verbatim).
"""
from __future__ import annotations

import ast
import operator
import re
from collections import Counter

from environments.acebench import data

_PROMPT_NAMES = {"SYSTEM_PROMPT_NORMAL": "SYSTEM_PROMPT_FOR_NORMAL_DATA_EN",
                 "SYSTEM_PROMPT_PREFERENCE": "SYSTEM_PROMPT_FOR_PREFERENCE_DATA_EN",
                 "SYSTEM_PROMPT_SPECIAL": "SYSTEM_PROMPT_FOR_SPECIAL_DATA_EN", "USER_PROMPT": "USER_PROMPT_EN"}


def __getattr__(name: str) -> str:
    """SYSTEM_PROMPT_NORMAL / _PREFERENCE / _SPECIAL and USER_PROMPT: the templates, read from data/."""
    if name in _PROMPT_NAMES:
        return data.prompts()[_PROMPT_NAMES[name]]
    raise AttributeError(name)


class _Unparseable(Exception):
    """The official decoder fails on this answer (an invalid verdict)."""


class _OfficialCrash(Exception):
    """The official checker raises an uncaught exception here (it gives no verdict)."""


# ---------------------------------------------------------------- parsing the answer text
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor, ast.BitAnd: operator.and_, ast.MatMult: operator.matmul}


def _arith(node):
    """The value of a literal arithmetic expression, as Python evaluates it (bounded)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](_arith(e) for e in node.elts)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_arith(k): _arith(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp):
        ops = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}
        return ops[type(node.op)](_arith(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _arith(node.left), _arith(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 4096:
            raise _Unparseable("exponent too large")
        if isinstance(node.op, ast.Mult) and any(isinstance(x, (str, bytes, list, tuple)) for x in (left, right)) \
                and any(isinstance(x, int) and x > 100_000 for x in (left, right)):
            raise _Unparseable("repetition too large")
        return _BINOPS[type(node.op)](left, right)
    raise _Unparseable(f"cannot evaluate {type(node).__name__}")


def _dotted(func) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _value(node):
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):  # the official reads every unary operator as a minus
        if isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float, complex)):
            return -node.operand.value
        raise _Unparseable("unsupported unary operand")
    if isinstance(node, ast.List):
        return list(map(_value, node.elts))
    if isinstance(node, ast.Dict):
        if None in node.keys:
            raise _Unparseable("dict unpacking")
        try:
            return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
        except TypeError:
            raise _Unparseable("unhashable dict key") from None
    if isinstance(node, ast.BinOp):
        try:
            return _arith(node)
        except (_Unparseable, ArithmeticError, TypeError, ValueError, KeyError, MemoryError) as exc:
            raise _Unparseable(f"cannot evaluate {ast.unparse(node)}: {exc}") from None
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return {_dotted(node.func): {kw.arg: _value(kw.value) for kw in node.keywords}}
    if isinstance(node, ast.Tuple):
        return tuple(map(_value, node.elts))
    if isinstance(node, ast.Subscript):
        return f"{ast.unparse(node.value)}[{ast.unparse(node.slice)}]"
    raise _Unparseable(f"unsupported syntax {type(node).__name__}")


def parse_calls(text: str) -> list[dict]:
    """[{name: {param: value}}] as the official decoder reads `text`; raises _Unparseable."""
    compact = "".join(text.split())
    try:
        body = ast.parse(compact, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise _Unparseable(f"not a Python expression: {exc}") from None
    if not isinstance(body, (ast.List, ast.Tuple, ast.Set)):
        raise _Unparseable("the answer is not a list of calls")
    calls = []
    for elt in body.elts:
        if not isinstance(elt, ast.Call):
            raise _Unparseable("an element of the list is not a call")
        try:
            calls.append(_value(elt))
        except RecursionError:
            raise _Unparseable("too deeply nested") from None
    return calls


def calls_to_text(calls) -> str:
    """Render [(name, {param: value})] as `[name(param=value, ...), ...]`, the syntax parse_calls reads."""
    return "[" + ", ".join(f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in dict(args).items()) + ")"
                           for name, args in calls) + "]"


# ---------------------------------------------------------------- normal categories
_TYPES = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
          "dict": dict, "any": str, "list": list, "object": dict, "objectArray": list, "list(string)": list,
          "list(enum)": list, "int": int, "enum": enumerate, "number": int}
_NESTED = ("array", "tuple", "list(string)", "list(enum)", "object", "objectArray")


def standardize(s: str) -> str:
    return re.sub(r"[ ,./\-_*^]", "", s).lower().replace("'", '"')


def _std(x):
    return standardize(x) if type(x) is str else x


def _bad(error_type: str, msg: str) -> dict:
    return {"valid": False, "error_type": error_type, "error": [msg]}


_OK = {"valid": True, "error_type": None, "error": []}


def _type_ok(param, value, expected, conv, nested) -> tuple[bool, bool]:
    """(passes the type check, value is exempt from the value check) for one parameter."""
    exp_type = None if expected == "" else type(expected)
    exempt = exp_type is not None and exp_type is not conv
    value = {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value
    ok = True
    if type(value) is conv:
        if nested is None:
            return True, exempt
        try:
            alternatives = iter(expected)
        except TypeError:
            raise _OfficialCrash(f"iterating a non-iterable expected value of {param}") from None
        for alt in alternatives:
            if type(alt) is not list or all(_type_ok(param, v, alt, nested, None)[0] for v in value):
                return True, exempt
        ok = False  # nested check failed; the expected value's own type may still excuse it
    if exp_type is not None and (type(value) is exp_type or expected == value):
        return ok, True
    return False, exempt


def _dict_ok(value, expected) -> bool:
    if not isinstance(value, dict):
        return False
    if not isinstance(expected, dict):
        raise _OfficialCrash("expected object is not a dict")
    if len(value) != len(expected):
        return False
    for key, v in value.items():
        v = {"true": True, "false": False}.get(v, v) if isinstance(v, str) else v
        if key not in expected:
            return False
        exp = expected[key]
        if not (_dict_ok(v, exp) if isinstance(exp, dict) else str(_std(exp)) in str(_std(v))):
            return False
    return True


def _call_ok(desc, name: str, args: dict, expected: dict) -> dict:
    if desc is None or "parameters" not in desc:
        raise _OfficialCrash("the expected function has no description with `parameters`")
    params = desc["parameters"]
    if args == {} and params == {}:
        return _OK
    if args == {} or params == {}:
        return _bad("wrong_param", f"{name}: no arguments given, or the function takes none")
    if "properties" not in params:
        raise _OfficialCrash("function parameters without `properties`")
    if expected == params["properties"]:
        return _OK
    if expected == {}:
        return _bad("wrong_param", f"{name}: arguments given where none are expected")
    if desc["name"] != name:
        return _bad("wrong_function_name", f"expected {desc['name']}, got {name}")
    props = params["properties"]
    if "required" not in params:
        raise _OfficialCrash("function parameters without `required`")
    missing = [p for p in params["required"] if p not in args]
    if missing:
        return _bad("lack_args", f"lack required_params: {missing[0]}")
    for p, value in args.items():
        if p not in props or p not in expected:
            return _bad("addition_args", f"addition params: {p}")
        spec = props[p]
        tname = spec.get("type") if isinstance(spec, dict) else None
        items = spec.get("items") if tname in _NESTED else None
        nname = None if tname not in _NESTED else items.get("type") if isinstance(items, dict) and "type" in items \
            else "string" if "string" in tname else "enum" if "enum" in tname else "dict"
        if not all(isinstance(t, str) and t in _TYPES for t in (tname, nname or "string")):
            raise _OfficialCrash(f"unknown schema type {tname!r} (items {nname!r}) of {p}")
        conv, nested = _TYPES[tname], nname and _TYPES[nname]
        value = list(value) if tname == "tuple" and type(value) is tuple else \
            float(value) if tname == "float" and type(value) is int else value
        ok, exempt = _type_ok(p, value, expected[p], conv, nested)
        if not ok:
            return _bad("type_error", f"wrong type for parameter ({p}) of api ({name}): expected {tname}, got {value!r}")
        if exempt:
            continue
        exp = expected[p]
        wrong = _bad("value_error", f"wrong value for parameter ({p}) of api ({name}): expected {exp!r}, got {value!r}")
        if conv is dict and not _dict_ok(value, exp):
            return wrong
        elif conv is list and nested is dict:
            if tname == "objectArray":
                if len(value) != len(exp):
                    return wrong
                if value:
                    raise _OfficialCrash("objectArray check calls dict_checker with too few arguments")
            if len(value) != len(exp) or not all(_dict_ok(v, e) for v, e in zip(value, exp)):
                return wrong
        elif conv is str and standardize(exp) not in standardize(value):
            return wrong
        elif conv is list and nested is not dict and [_std(x) for x in value] != [_std(x) for x in exp]:
            return wrong
    return _OK


def _normal_ok(functions, calls: list[dict], expected: dict) -> dict:
    if len(calls) != len(expected):
        return _bad("wrong functions number", "The number of functions does not match the answer.")
    wanted = [(key, re.sub(r"_\d+$", "", key), args) for key, args in expected.items()]
    got = Counter(next(iter(c)) for c in calls)
    need = Counter(name for _, name, _ in wanted)
    if got != need:
        return _bad("function_mismatch", f"functions called {dict(got)}, expected {dict(need)}")
    for key, name, args in wanted:
        desc = functions if not isinstance(functions, list) else next((f for f in functions if f["name"] in key), None)
        verdict = _bad("function_mismatch", f"no call of {name}")
        for call in calls:
            cname, cargs = next(iter(call.items()))
            if cname == name:
                verdict = _call_ok(desc, cname, cargs, args)
                if verdict["valid"]:
                    break
        if not verdict["valid"]:
            return verdict
    return _OK


# ---------------------------------------------------------------- special categories
def _special_ok(category: str, text: str, expected) -> dict:
    if "incomplete" in category:
        for api, missing in expected.items():
            if "Missing necessary parameters" not in text:
                return _bad("error_detection", f"did not say the request misses parameters of {api}")
            if api not in text or any(m not in text for m in missing):
                return _bad("error_correction", f"did not name the missing parameters {missing} of {api}")
    elif "error" in category:
        for param, wrong in expected.items():
            if "There is incorrect value" not in text:
                return _bad("error_detection", f"did not say the value of {param} is incorrect")
            if any(w not in text for w in wrong):
                return _bad("error_correction", f"did not name the incorrect values {wrong} of {param}")
    elif "irrelevant" in category and "the limitations of the function" not in text:
        return _bad("error_detection", "did not say the request is beyond the limitations of the function")
    return _OK


def check(category: str, item_id: str, answer_text: str) -> dict:
    """{"valid", "error_type", "error": [str]} for one answer to a normal_* or special_* item."""
    if category not in data.CATEGORIES or category.startswith("agent"):
        raise ValueError(f"check() scores normal_* and special_* categories, not {category!r}")
    item, expected = data.items(category)[item_id], data.answer(item_id)["ground_truth"]
    if not isinstance(answer_text, str):
        return _bad("wrong_output_format", "the answer is not text")
    if category.startswith("special"):
        return dict(_special_ok(category, answer_text, expected))
    try:
        calls = parse_calls(answer_text)
    except _Unparseable as exc:
        return _bad("wrong_output_format", f"Invalid syntax. Failed to decode AST. {exc}")
    first = None
    try:
        for alternative in expected if isinstance(expected, list) else [expected]:
            verdict = _normal_ok(item["function"], calls, alternative)
            if verdict["valid"]:
                return dict(_OK)
            first = first or verdict
    except _OfficialCrash as exc:
        return _bad("official_checker_error", f"the official checker raises here: {exc}")
    return dict(first)


def system_prompt(category: str, item: dict) -> str:
    """The system prompt ACEBench's English inference gives this item (model_inference/*_inference.py)."""
    kind = "SPECIAL" if category.startswith("special") else "PREFERENCE" if "preference" in category else "NORMAL"
    template = __getattr__(f"SYSTEM_PROMPT_{kind}")
    return template.format(time=item.get("time", ""), profile=item.get("profile", ""), function=item["function"])


def user_prompt(item: dict) -> str:
    """The user message: "Conversation history 1..t:" and the item's question."""
    return __getattr__("USER_PROMPT").format(question=item["question"])
