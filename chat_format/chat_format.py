"""The chat format: the one renderer of messages + tools into model text, and the one parser of
tool calls out of model text. Training (SFT, GRPO) and evaluation both go through this module,
so a model is always asked in exactly the form it was trained on.

The format is one Jinja chat template, `chat_template.jinja` beside this file (`CHAT_TEMPLATE`),
rendered by transformers' renderer (the one `tokenizer.apply_chat_template` runs) and saved with
every model directory and adapter, so TRL, axolotl, vLLM and HF see the same text. The text is
ChatML (`<|im_start|>role\\n…<|im_end|>\\n`, SmolLM2's and Qwen's tokens):

- the first system message (or `DEFAULT_SYSTEM`) carries the tools. The `compact` style renders
  one line per tool: a Python-like signature (required parameters first, `?` marks optional ones)
  and the description's first line, cut to `DESCRIPTION_CHARS` — about a fifth of the tokens of
  the JSON schemas, which matters for small models on CPU (shared/FIELD-NOTES.md). The `json`
  style renders each function schema as one JSON line, for larger models (`tool_style=`);
- an assistant message is its content, then one `<tool_call>{"name": …, "arguments": {…}}</tool_call>`
  per call (Hermes style, arguments as the record's JSON string). It sits inside
  `{% generation %}` unless its `training` flag is false, so TRL's `assistant_only_loss=True`
  trains exactly the weight-1 turns (body and `<|im_end|>`);
- a tool result is a `tool` turn.

`parse_tool_calls` reads Hermes blocks, or a BFCL-style Python call list (`[f(a=1), g(b='x')]`)
through `ast` with literal arguments only. Model text is never evaluated.
"""
from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from base.canonical import shared

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
GENERATION_PROMPT = IM_START + "assistant\n"
STOP = IM_END
STYLES = ("compact", "json")
DEFAULT_STYLE = "compact"
DEFAULT_SYSTEM = "You are a helpful assistant."
DESCRIPTION_CHARS = 120  # the template cuts a tool description here
MAX_PARSE_CHARS = 100_000
TRAINING_FIELD = "training"  # per message: axolotl's `message_field_training`; the template reads it
CHAT_TEMPLATE = (Path(__file__).with_name("chat_template.jinja")).read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# rendering: every function below renders through CHAT_TEMPLATE with transformers' Jinja renderer
# (what `tokenizer.apply_chat_template` runs), so there is one definition of the format.


def _function(tool: Mapping) -> Mapping:
    return tool.get("function", tool)


def parameter_order(parameters: Mapping | None) -> list[str]:
    """Parameter names as the signature lists them: required ones in `required` order, then the
    optional ones in schema order (records are canonical JSON, so schema order is alphabetical)."""
    props = (parameters or {}).get("properties") or {}
    required = [n for n in (parameters or {}).get("required") or [] if n in props]
    return required + [n for n in props if n not in required]


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"unknown tool style {style!r} (one of {', '.join(STYLES)})")


def _macros(style: str):
    """The template's macros (tool_line, tool_block, assistant_body) for one tool style."""
    from transformers.utils.chat_template_utils import _compile_jinja_template   # slow to import: imported when first rendered

    _check_style(style)
    return _compile_jinja_template(CHAT_TEMPLATE).make_module({"tool_style": style, "messages": []})


def load_renderer(style: str = DEFAULT_STYLE) -> None:
    """Import the template's renderer now (transformers' import takes about a second), so that the
    first record rendered later does not wait for it."""
    _macros(style)


def tool_line(tool: Mapping, style: str = DEFAULT_STYLE) -> str:
    """One tool as one line of the system prompt."""
    return str(_macros(style).tool_line(dict(tool)))


@shared   # a tool list the checker shares: once per list, not once per record
def render_tools(tools: Sequence[Mapping], style: str = DEFAULT_STYLE) -> str:
    """The tool block appended to the system prompt ("" without tools): the template's `tool_block`,
    put together from each tool's `tool_line` (remembered per tool, `_tool_line`) in the frame
    the template puts around them (`_block_frame`)."""
    tools = list(tools or [])
    frame = _block_frame(style)
    try:
        keys = [json.dumps(tool, ensure_ascii=False) for tool in tools]   # key order kept: the line follows it
    except (TypeError, ValueError):
        keys = None
    if not tools or frame is None or keys is None:
        return str(_macros(style).tool_block(tools))
    return frame[0] + "".join("\n" + _tool_line(key, style) for key in keys) + frame[1]


@functools.lru_cache(maxsize=8192)
def _tool_line(tool_json: str, style: str) -> str:
    """Rendering through the sandboxed template takes milliseconds a tool list, and a corpus offers
    the same few tools again and again (every RL record of a trajectory repeats its list)."""
    return str(_macros(style).tool_line(json.loads(tool_json)))


@functools.lru_cache(maxsize=None)
def _block_frame(style: str) -> tuple[str, str] | None:
    """The text the template's `tool_block` puts before and after its tools' lines, read from the
    template itself: tool_block(tools) is head + "\\n" + tool_line(tool) for each tool + tail. None
    (render whole lists) should a template not be made so, checked here on one and two tools."""
    macros = _macros(style)
    one, two = {"name": "f", "description": "one"}, {"name": "g", "parameters": {"properties": {"x": {}}}}
    lines = [str(macros.tool_line(dict(tool))) for tool in (one, two)]
    head, found, tail = str(macros.tool_block([one, two])).partition("\n" + lines[0] + "\n" + lines[1])
    if not found or str(macros.tool_block([one])) != head + "\n" + lines[0] + tail:
        return None
    return head, tail


def render_tool_call(call: Mapping) -> str:
    """`<tool_call>{"name": …, "arguments": …}</tool_call>` for an OpenAI tool call (or a bare
    `{"name", "arguments"}`); string arguments are used verbatim, like HF templates do."""
    return render_assistant({"role": "assistant", "content": None, "tool_calls": [call]})


def render_assistant(message: Mapping) -> str:
    """The body of an assistant turn: what the model produces before `<|im_end|>`."""
    return str(_macros(DEFAULT_STYLE).assistant_body(dict(message)))


def with_training_flags(messages: Sequence[Mapping], weights: Sequence[int] | None) -> list[dict]:
    """A copy of `messages` whose assistant turns carry `training` (weight 1 → true); the other
    messages carry `training: false`. `weights` has one 0/1 per assistant message (None: all 1)."""
    n_assistant = sum(1 for m in messages if m.get("role") == "assistant")
    weights = [1] * n_assistant if weights is None else list(weights)
    if len(weights) != n_assistant:
        raise ValueError(f"{len(weights)} weights for {n_assistant} assistant messages")
    flags = iter(weights)
    return [{**m, TRAINING_FIELD: bool(next(flags)) if m.get("role") == "assistant" else False} for m in messages]


def render_with_spans(messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None, *,
                      weights: Sequence[int] | None = None, add_generation_prompt: bool = False,
                      style: str = DEFAULT_STYLE) -> tuple[str, list[tuple[int, int]]]:
    """The text of a conversation and the character spans of its trained assistant turns (the
    template's `{% generation %}` blocks).

    A span covers an assistant turn's body and its closing `<|im_end|>` (so the model learns to
    stop), not the `<|im_start|>assistant` header. `weights` has one 0/1 per assistant message
    (default: each message's own `training` flag, else 1); weight-0 turns stay in the text but
    get no span."""
    from transformers.utils.chat_template_utils import render_jinja_template

    _check_style(style)
    if weights is not None:
        messages = with_training_flags(messages, weights)
    rendered, spans = render_jinja_template(
        conversations=[list(messages)], tools=list(tools) if tools else None, chat_template=CHAT_TEMPLATE,
        return_assistant_tokens_mask=True, add_generation_prompt=add_generation_prompt, tool_style=style)
    return rendered[0], [tuple(s) for s in spans[0]]


def render(messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None, *,
           add_generation_prompt: bool = False, style: str = DEFAULT_STYLE) -> str:
    """The model text of a conversation."""
    return render_with_spans(messages, tools, add_generation_prompt=add_generation_prompt, style=style)[0]


def render_prompt(messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None, *,
                  style: str = DEFAULT_STYLE) -> str:
    """The text a model continues to produce the next assistant turn (stop at `STOP`)."""
    return render(messages, tools, add_generation_prompt=True, style=style)


def tools_in_system(messages: Sequence[Mapping], tools: Sequence[Mapping] | None,
                    style: str = DEFAULT_STYLE) -> list[dict]:
    """The conversation with its tools rendered into the system message: rendered without tools,
    it gives the same text as `messages` rendered with them (a self-contained chat prompt, e.g.
    TRL's `prompt` column, which carries no per-row tools)."""
    messages = [dict(m) for m in messages]
    if messages and messages[0].get("role") == "system":
        system, rest = messages[0].get("content") or "", messages[1:]
    else:
        system, rest = DEFAULT_SYSTEM, messages
    block = render_tools(tools or [], style)
    return [{"role": "system", "content": system + ("\n\n" + block if block else "")}, *rest]


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
