"""The chat format: the one renderer of messages + tools into model text, and the one parser of
tool calls out of model text. Training (SFT, GRPO) and evaluation both go through this module,
so a model is always asked in exactly the form it was trained on.

The text is ChatML (`<|im_start|>role\\n…<|im_end|>\\n`, SmolLM2's and Qwen's tokens):

- the first system message (or `DEFAULT_SYSTEM`) carries the tools. The `compact` style renders
  one line per tool: a Python-like signature (required parameters first, `?` marks optional ones)
  and the description's first line, cut to `DESCRIPTION_CHARS` — about a fifth of the tokens of
  the JSON schemas, which matters for small models on CPU (shared/FIELD-NOTES.md). The `json`
  style renders each function schema as one JSON line, for larger models;
- an assistant message is its content, then one `<tool_call>{"name": …, "arguments": {…}}</tool_call>`
  per call (Hermes style, arguments as the record's JSON string);
- a tool result is a `tool` turn.

`CHAT_TEMPLATE` is the same format as a Jinja chat template (HF `apply_chat_template`, vLLM);
it is saved with every adapter, and a test checks it renders byte-identical text.

`parse_tool_calls` reads Hermes blocks, or a BFCL-style Python call list (`[f(a=1), g(b='x')]`)
through `ast` with literal arguments only. Model text is never evaluated.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
GENERATION_PROMPT = IM_START + "assistant\n"
STOP = IM_END
STYLES = ("compact", "json")
DEFAULT_STYLE = "compact"
DEFAULT_SYSTEM = "You are a helpful assistant."
TOOLS_HEADER = "You can call these functions:"
TOOLS_FOOTER = ('To call a function, write <tool_call>{"name": <function name>, "arguments": '
                '<arguments as a JSON object>}</tool_call>, one block per call.')
DESCRIPTION_CHARS = 120
# BFCL prefixes every description with its system's blurb; the tool's own text follows this.
DESCRIPTION_MARKER = "Tool description: "
MAX_PARSE_CHARS = 100_000
_PYTYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
            "array": "list", "object": "dict", "null": "None"}


# --------------------------------------------------------------------------------------------
# rendering


def _function(tool: Mapping) -> Mapping:
    return tool.get("function", tool)


def _type_text(schema: Mapping) -> str:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return "|".join(json.dumps(v, ensure_ascii=False) for v in enum)
    t = schema.get("type")
    if isinstance(t, list):
        return "|".join(_PYTYPES.get(x, x) for x in t)
    if not isinstance(t, str):
        return "any"
    items = schema.get("items")
    if t == "array" and isinstance(items, Mapping) and isinstance(items.get("type"), str):
        return "list[" + _PYTYPES.get(items["type"], items["type"]) + "]"
    return _PYTYPES.get(t, t)


def _description(text: str | None) -> str:
    d = (text or "").split(DESCRIPTION_MARKER)[-1].split("\n")[0].strip()
    if len(d) > DESCRIPTION_CHARS:
        d = d[:DESCRIPTION_CHARS].rstrip() + "..."
    return d


def parameter_order(parameters: Mapping | None) -> list[str]:
    """Parameter names as the signature lists them: required ones in `required` order, then the
    optional ones in schema order (records are canonical JSON, so schema order is alphabetical)."""
    props = (parameters or {}).get("properties") or {}
    required = [n for n in (parameters or {}).get("required") or [] if n in props]
    return required + [n for n in props if n not in required]


def tool_line(tool: Mapping, style: str = DEFAULT_STYLE) -> str:
    """One tool as one line of the system prompt."""
    fn = _function(tool)
    if style == "json":
        return json.dumps(fn, ensure_ascii=False)
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    required = params.get("required") or []
    args = [n + ("" if n in required else "?") + ": " + _type_text(props[n]) for n in parameter_order(params)]
    desc = _description(fn.get("description"))
    return "- " + fn["name"] + "(" + ", ".join(args) + ")" + (": " + desc if desc else "")


def render_tools(tools: Sequence[Mapping], style: str = DEFAULT_STYLE) -> str:
    """The tool block appended to the system prompt ("" without tools)."""
    if style not in STYLES:
        raise ValueError(f"unknown tool style {style!r} (one of {', '.join(STYLES)})")
    if not tools:
        return ""
    return "\n".join([TOOLS_HEADER, *(tool_line(t, style) for t in tools), TOOLS_FOOTER])


def render_tool_call(call: Mapping) -> str:
    """`<tool_call>{"name": …, "arguments": …}</tool_call>` for an OpenAI tool call (or a bare
    `{"name", "arguments"}`); string arguments are used verbatim, like HF templates do."""
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return TOOL_CALL_OPEN + '{"name": ' + json.dumps(fn["name"], ensure_ascii=False) + ', "arguments": ' \
        + args_text + "}" + TOOL_CALL_CLOSE


def render_assistant(message: Mapping) -> str:
    """The body of an assistant turn: what the model produces before `<|im_end|>`."""
    content = message.get("content") or ""
    calls = "\n".join(render_tool_call(c) for c in message.get("tool_calls") or [])
    return content + ("\n" if content and calls else "") + calls


def _turn(role: str, body: str) -> str:
    return IM_START + role + "\n" + body + IM_END + "\n"


def render_with_spans(messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None, *,
                      weights: Sequence[int] | None = None, add_generation_prompt: bool = False,
                      style: str = DEFAULT_STYLE) -> tuple[str, list[tuple[int, int]]]:
    """The text of a conversation and the character spans of its trained assistant turns.

    A span covers an assistant turn's body and its closing `<|im_end|>` (so the model learns to
    stop), not the `<|im_start|>assistant` header. `weights` has one 0/1 per assistant message
    (default: all 1); weight-0 turns stay in the text but get no span."""
    n_assistant = sum(1 for m in messages if m.get("role") == "assistant")
    weights = [1] * n_assistant if weights is None else list(weights)
    if len(weights) != n_assistant:
        raise ValueError(f"{len(weights)} weights for {n_assistant} assistant messages")
    start = 0
    system = DEFAULT_SYSTEM
    if messages and messages[0].get("role") == "system":
        system, start = messages[0].get("content") or "", 1
    block = render_tools(tools or [], style)
    parts = [_turn("system", system + ("\n\n" + block if block else ""))]
    spans: list[tuple[int, int]] = []
    length, k = len(parts[0]), 0
    for m in messages[start:]:
        role = m.get("role")
        if role == "assistant":
            body = render_assistant(m)
            if weights[k]:
                begin = length + len(GENERATION_PROMPT)
                spans.append((begin, begin + len(body) + len(IM_END)))
            k += 1
        else:
            body = m.get("content") or ""
        text = _turn(role, body)
        parts.append(text)
        length += len(text)
    if add_generation_prompt:
        parts.append(GENERATION_PROMPT)
    return "".join(parts), spans


def render(messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None, *,
           add_generation_prompt: bool = False, style: str = DEFAULT_STYLE) -> str:
    """The model text of a conversation."""
    return render_with_spans(messages, tools, add_generation_prompt=add_generation_prompt, style=style)[0]


def render_prompt(messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None, *,
                  style: str = DEFAULT_STYLE) -> str:
    """The text a model continues to produce the next assistant turn (stop at `STOP`)."""
    return render(messages, tools, add_generation_prompt=True, style=style)


def _q(text: str) -> str:
    """A Python string as a single-quoted Jinja literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


# The same format as a Jinja chat template. Keep in step with the functions above:
# tests/test_chat_format.py renders the sample corpus both ways and compares bytes.
CHAT_TEMPLATE = "".join([
    "{%- set style = tool_style | default('compact') -%}\n",
    "{%- set pytypes = {'string': 'str', 'integer': 'int', 'number': 'float', 'boolean': 'bool', "
    "'array': 'list', 'object': 'dict', 'null': 'None'} -%}\n",
    "{%- macro type_text(s) -%}\n",
    "{%- if s.enum is defined and s.enum is iterable and s.enum is not string and s.enum | length > 0 -%}",
    "{%- for v in s.enum -%}{{ '|' if not loop.first }}{{ v | tojson }}{%- endfor -%}\n",
    "{%- elif s.type is defined and s.type is iterable and s.type is not string and s.type is not mapping -%}",
    "{%- for x in s.type -%}{{ '|' if not loop.first }}{{ pytypes.get(x, x) }}{%- endfor -%}\n",
    "{%- elif s.type is not defined or s.type is not string -%}any\n",
    "{%- elif s.type == 'array' and s['items'] is defined and s['items'] is mapping ",
    "and s['items'].type is defined and s['items'].type is string -%}",
    "list[{{ pytypes.get(s['items'].type, s['items'].type) }}]\n",
    "{%- else -%}{{ pytypes.get(s.type, s.type) }}{%- endif -%}\n",
    "{%- endmacro -%}\n",
    "{%- macro tool_line(tool) -%}\n",
    "{%- set fn = tool.function if tool.function is defined else tool -%}\n",
    "{%- if style == 'json' -%}{{ fn | tojson }}{%- else -%}\n",
    "{%- set params = fn.parameters if fn.parameters is defined and fn.parameters else {} -%}\n",
    "{%- set props = params.properties if params.properties is defined and params.properties else {} -%}\n",
    "{%- set required = params.required if params.required is defined and params.required else [] -%}\n",
    "{%- set ns = namespace(args=[]) -%}\n",
    "{%- for n in required -%}{%- if n in props -%}",
    "{%- set ns.args = ns.args + [n ~ ': ' ~ type_text(props[n])] -%}{%- endif -%}{%- endfor -%}\n",
    "{%- for n, s in props.items() -%}{%- if n not in required -%}",
    "{%- set ns.args = ns.args + [n ~ '?: ' ~ type_text(s)] -%}{%- endif -%}{%- endfor -%}\n",
    "{%- set d = ((fn.description if fn.description is defined and fn.description else '')",
    ".split(", _q(DESCRIPTION_MARKER), ")[-1].split('\\n')[0]).strip() -%}\n",
    f"{{%- if d | length > {DESCRIPTION_CHARS} -%}}{{%- set d = d[:{DESCRIPTION_CHARS}].rstrip() ~ '...' -%}}",
    "{%- endif -%}\n",
    "- {{ fn.name }}({{ ns.args | join(', ') }}){{ ': ' ~ d if d }}\n",
    "{%- endif -%}\n",
    "{%- endmacro -%}\n",
    "{%- if messages and messages[0].role == 'system' -%}",
    "{%- set system = messages[0].content or '' -%}{%- set rest = messages[1:] -%}\n",
    "{%- else -%}{%- set system = ", _q(DEFAULT_SYSTEM), " -%}{%- set rest = messages -%}{%- endif -%}\n",
    "{{- ", _q(IM_START + "system\n"), " ~ system -}}\n",
    "{%- if tools -%}\n",
    "{{- ", _q("\n\n" + TOOLS_HEADER), " -}}\n",
    "{%- for tool in tools -%}{{- '\\n' ~ tool_line(tool) -}}{%- endfor -%}\n",
    "{{- ", _q("\n" + TOOLS_FOOTER), " -}}\n",
    "{%- endif -%}\n",
    "{{- ", _q(IM_END + "\n"), " -}}\n",
    "{%- for message in rest -%}\n",
    "{{- ", _q(IM_START), " ~ message.role ~ '\\n' -}}\n",
    "{%- if message.role == 'assistant' -%}\n",
    "{%- set content = message.content or '' -%}{{- content -}}\n",
    "{%- if message.tool_calls is defined and message.tool_calls -%}\n",
    "{%- for tc in message.tool_calls -%}\n",
    "{%- set f = tc.function if tc.function is defined else tc -%}\n",
    "{{- '\\n' if (content and loop.first) or not loop.first -}}\n",
    "{{- ", _q(TOOL_CALL_OPEN + '{"name": '), " ~ (f.name | tojson) ~ ", _q(', "arguments": '), " -}}\n",
    "{{- f.arguments if f.arguments is string else ((f.arguments if f.arguments is defined else {}) | tojson) -}}\n",
    "{{- ", _q("}" + TOOL_CALL_CLOSE), " -}}\n",
    "{%- endfor -%}\n",
    "{%- endif -%}\n",
    "{%- else -%}{{- message.content or '' -}}{%- endif -%}\n",
    "{{- ", _q(IM_END + "\n"), " -}}\n",
    "{%- endfor -%}\n",
    "{%- if add_generation_prompt -%}{{- ", _q(GENERATION_PROMPT), " -}}{%- endif -%}\n",
])


# --------------------------------------------------------------------------------------------
# parsing


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def as_dict(self) -> dict:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class Parsed:
    """What a model turn says: its tool calls, the text around them, and why it is unparseable
    when it is (`error`). `format` is "hermes", "python" or None (plain content)."""

    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""
    error: str | None = None
    format: str | None = None

    @property
    def parseable(self) -> bool:
        """At least one tool call and nothing malformed."""
        return self.error is None and bool(self.calls)


_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|\Z)", re.S)
_FENCE = re.compile(r"\A```[a-zA-Z]*\s*(.*?)\s*```\Z", re.S)


def parse_tool_calls(text: str, tools: Sequence[Mapping] | None = None) -> Parsed:
    """Tool calls in a model turn: Hermes `<tool_call>` blocks (an unclosed last block counts
    when its JSON is complete), else a Python call list. Positional arguments of Python calls
    are named from `tools` (signature order); without the schema they are an error."""
    text = (text or "").split(STOP)[0]
    if len(text) > MAX_PARSE_CHARS:
        return Parsed(content=text, error=f"turn longer than {MAX_PARSE_CHARS} characters")
    if TOOL_CALL_OPEN in text:
        return _parse_hermes(text)
    return _parse_python(text, tools)


def _parse_hermes(text: str) -> Parsed:
    calls, errors = [], []
    for i, match in enumerate(_BLOCK.finditer(text)):
        try:
            obj = json.loads(match.group(1).strip())
        except (ValueError, RecursionError):
            errors.append(f"tool call {i + 1} is not valid JSON")
            continue
        args = obj.get("arguments", obj.get("parameters", {})) if isinstance(obj, dict) else None
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                args = None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"] \
                or not isinstance(args, dict):
            errors.append(f'tool call {i + 1} is not {{"name": string, "arguments": object}}')
            continue
        calls.append(ToolCall(obj["name"], args))
    content = _BLOCK.sub("", text).replace(TOOL_CALL_CLOSE, "").strip()
    return Parsed(calls, content, "; ".join(errors) or None, "hermes")


def _callee(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _callee(node.value)
        return None if base is None else base + "." + node.attr
    return None


def _parse_python(text: str, tools: Sequence[Mapping] | None) -> Parsed:
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    source = fenced.group(1) if fenced else stripped
    looks_like_calls = bool(re.match(r"\A\[?\s*[A-Za-z_][\w.]*\s*\(", source))
    try:
        node = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        node = None
    items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    if node is None or not items or not all(isinstance(n, ast.Call) for n in items):
        if looks_like_calls:
            return Parsed(content=text.strip(), error="not a list of function calls", format="python")
        return Parsed(content=text.strip())
    orders = {_function(t).get("name"): parameter_order(_function(t).get("parameters")) for t in tools or []}
    calls = []
    for call in items:
        name = _callee(call.func)
        if name is None:
            return Parsed(content="", error="a callee is not a plain or dotted name", format="python")
        try:
            args = {}
            if call.args:
                order = orders.get(name)
                if order is None or len(call.args) > len(order):
                    raise ValueError(f"{name}: positional arguments cannot be named")
                for pos, value in zip(order, call.args):
                    if isinstance(value, ast.Starred):
                        raise ValueError(f"{name}: *args are not allowed")
                    args[pos] = ast.literal_eval(value)
            for kw in call.keywords:
                if kw.arg is None:
                    raise ValueError(f"{name}: **kwargs are not allowed")
                if kw.arg in args:
                    raise ValueError(f"{name}: argument {kw.arg!r} given twice")
                args[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
            message = str(exc) if isinstance(exc, ValueError) and str(exc).startswith(name) \
                else f"{name}: an argument is not a literal value"
            return Parsed(content="", error=message, format="python")
        calls.append(ToolCall(name, args))
    return Parsed(calls, "", None, "python")


# --------------------------------------------------------------------------------------------
# records


def canonical_arguments(arguments: str | Mapping) -> str:
    """Tool-call arguments as the format writes them: `json.dumps` of the object, key order kept."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments  # not JSON: left for the reader to see, never "repaired"
    return json.dumps(arguments, ensure_ascii=False)


def normalize_messages(messages: Sequence[Mapping]) -> list[dict]:
    """A copy of `messages` whose tool-call arguments are canonical, so a record's trained text
    does not depend on how its source spaced its JSON."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c["function"],
                                                  "arguments": canonical_arguments(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def to_openai_tool_calls(calls: Sequence[ToolCall | Mapping], id_prefix: str = "call_") -> list[dict]:
    """Parsed calls as OpenAI `tool_calls` entries of an assistant message."""
    out = []
    for i, c in enumerate(calls):
        name, args = (c.name, c.arguments) if isinstance(c, ToolCall) else (c["name"], c.get("arguments", {}))
        out.append({"id": f"{id_prefix}{i}", "type": "function",
                    "function": {"name": name, "arguments": canonical_arguments(args)}})
    return out
