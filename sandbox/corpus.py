"""Loading the raw corpus: canonical JSONL, plus ShareGPT and Agent Data Protocol input.

Every input line becomes one canonical raw record (DESIGN.md "Formats"), checked with
`sandbox.schemas.check_raw`. A bad line is named as `path:line: reason`; by default the first
one aborts with a `UserError`, with `on_error="skip"` bad lines are collected instead.

Lines are read in binary with bounded reads, so a line longer than `max_line_bytes` is
reported and skipped to its newline without ever being held in memory.

Formats (detected per line with `fmt="auto"`):

- canonical: `{"id", "messages", "tools"?, "source"?, "task"?, "outcome"?, "meta"?}`; unknown
  top-level keys are kept under `meta["extra"][key]`.
- ShareGPT (LLaMA-Factory style): `{"conversations": [{"from", "value"}], "system"?, "tools"?,
  "id"?}` with `from` in human|user|gpt|assistant|system|function_call|observation|tool.
- ADP (Agent Data Protocol, neulab/agent-data-protocol standardized schema): `{"id", "content":
  [actions and observations with "class_"], "details"?, "schema_version"?, ...}`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

from evolver.errors import UserError
from evolver.files import atomic_write
from sandbox.schemas import ROLES, canonical_json, check_raw

FORMATS = ("canonical", "sharegpt", "adp")
DEFAULT_MAX_LINE_BYTES = 64 * 2**20
_SKIP_CHUNK = 2**20
_CANONICAL_KEYS = frozenset(("id", "source", "task", "tools", "messages", "outcome", "meta"))


@dataclass(frozen=True)
class Corpus:
    records: list[dict]        # canonical raw records, file order
    sha256: str                # see `load_corpus`
    paths: tuple[str, ...]
    format: str                # "canonical" | "sharegpt" | "adp" | "mixed"
    skipped: tuple[str, ...]   # "file:line: reason" of skipped lines (on_error="skip")


class _BadRecord(ValueError):
    """A conversion failure; its message is the reason (with a field path)."""


# --------------------------------------------------------------------------- reading


def _open(path: str):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a corpus file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None


def iter_lines(path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *,
               hasher=None) -> Iterator[tuple[int, bytes | None, str | None]]:
    """Yield `(lineno, line, None)` for every non-blank line (without its `\\n` / `\\r\\n`), or
    `(lineno, None, reason)` for a line longer than `max_line_bytes`, which is skipped to its
    newline in bounded reads and never held whole. Memory stays O(max_line_bytes).
    `hasher` (a hashlib object), when given, is fed every byte of the file as it is read."""
    path = os.fspath(path)
    limit = max_line_bytes + 2  # room for "\r\n"
    update = hasher.update if hasher is not None else None
    with _open(path) as f:
        lineno = 0
        while True:
            chunk = f.readline(limit)
            if not chunk:
                return
            lineno += 1
            if update:
                update(chunk)
            if chunk.endswith(b"\n") or len(chunk) < limit:
                line = chunk[:-1] if chunk.endswith(b"\n") else chunk
                if line.endswith(b"\r"):
                    line = line[:-1]
                del chunk
                if len(line) > max_line_bytes:
                    yield lineno, None, _too_long(len(line), max_line_bytes)
                elif line.strip():
                    yield lineno, line, None
                continue
            # Too long: skip to the newline without holding the line.
            total = len(chunk)
            del chunk
            while True:
                piece = f.readline(_SKIP_CHUNK)
                if not piece:
                    break
                if update:
                    update(piece)
                total += len(piece)
                if piece.endswith(b"\n"):
                    total -= 1
                    break
            yield lineno, None, _too_long(total, max_line_bytes)


def _too_long(n: int, limit: int) -> str:
    return f"line is longer than max_line_bytes ({n} bytes > {limit})"


def file_sha256(path) -> str:
    """sha256 hex of a file's bytes, read in bounded chunks."""
    h = hashlib.sha256()
    with _open(os.fspath(path)) as f:
        for block in iter(lambda: f.read(_SKIP_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- writing


def write_corpus(records: Iterable[Mapping], path) -> None:
    """Write canonical JSONL atomically (one canonical JSON line per record)."""
    atomic_write(path, "".join(canonical_json(record) + "\n" for record in records))


# --------------------------------------------------------------------------- parsing


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed in canonical JSON")


def _parse(line: bytes) -> Any:
    """Decode and parse one line; raises _BadRecord with the reason."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadRecord(f"not UTF-8: invalid byte 0x{line[exc.start]:02x} at byte offset "
                         f"{exc.start} of the line") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise _BadRecord(f"not JSON: {exc.msg} at column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        raise _BadRecord(f"not JSON: {exc}") from None


def detect_format(obj: Mapping) -> str | None:
    """'canonical', 'sharegpt', 'adp', or None when the object is none of them."""
    if "messages" in obj:
        return "canonical"
    if "conversations" in obj:
        return "sharegpt"
    content = obj.get("content")
    if isinstance(content, list) and (
            "schema_version" in obj or not content
            or any(isinstance(item, dict) and "class_" in item for item in content)):
        return "adp"
    return None


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def _first_user_text(messages: list[dict]) -> str:
    for m in messages:
        if m["role"] == "user":
            return m.get("content") or ""
    return ""


def _as_tool(tool: Any, where: str) -> dict:
    """An OpenAI tool entry; a bare function schema {name, description, parameters} is wrapped."""
    if not isinstance(tool, dict):
        raise _BadRecord(f"{where}: a tool must be an object, not {_json_type(tool)}")
    if "function" in tool:
        return tool if "type" in tool else {"type": "function", **tool}
    if "name" in tool:
        return {"type": "function", "function": tool}
    raise _BadRecord(f"{where}: a tool needs 'function' or 'name'")


def _as_list(value: Any, where: str, what: str) -> Any:
    """A JSON string is parsed and a lone object wrapped in a list; anything else is returned as is."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise _BadRecord(f"{where}: {what} is not JSON ({exc})") from None
    return [value] if isinstance(value, dict) else value


def _tools_from(value: Any, where: str) -> list[dict] | None:
    """Tools given as a list or a JSON string of one (bare function schemas wrapped); None when
    absent or an empty string."""
    if value is None or value == "":
        return None
    value = _as_list(value, where, "tools string")
    if not isinstance(value, list):
        raise _BadRecord(f"{where}: must be a list of tools, not {_json_type(value)}")
    return [_as_tool(t, f"{where}[{i}]") for i, t in enumerate(value)]


class _ToolSynth:
    """Builds tool schemas from the calls seen when a record offers none."""

    def __init__(self) -> None:
        self.props: dict[str, dict[str, Any]] = {}
        self.required: dict[str, set[str]] = {}

    def see(self, name: str, args: Any) -> None:
        props = self.props.setdefault(name, {})
        keys = set(args) if isinstance(args, dict) else set()
        if name in self.required:
            self.required[name] &= keys
        else:
            self.required[name] = keys
        if isinstance(args, dict):
            for key, value in args.items():
                t = _json_type(value)
                if t == "null":
                    props.setdefault(key, {})
                elif key not in props:
                    props[key] = {"type": t}
                elif props[key].get("type") != t:
                    props[key] = {}

    def add_name(self, name: str) -> None:
        self.props.setdefault(name, {})
        self.required.setdefault(name, set())

    def tools(self) -> list[dict]:
        out = []
        for name, props in self.props.items():
            params: dict[str, Any] = {"type": "object", "properties": props}
            req = sorted(self.required.get(name) or ())
            if req:
                params["required"] = req
            out.append({"type": "function", "function": {"name": name, "parameters": params}})
        return out


def _arguments_json(args: Any, where: str) -> str:
    if args is None:
        return "{}"
    if isinstance(args, str):
        return args
    if isinstance(args, dict):
        return canonical_json(args)
    raise _BadRecord(f"{where}: arguments must be an object or a JSON string, not {_json_type(args)}")


def _parsed_args(args_json: str) -> Any:
    try:
        return json.loads(args_json)
    except ValueError:
        return None


# --------------------------------------------------------------------------- canonical


def convert_canonical(obj: dict) -> dict:
    extra = {k: obj[k] for k in obj if k not in _CANONICAL_KEYS}
    if not extra:
        return obj
    record = {k: obj[k] for k in obj if k in _CANONICAL_KEYS}
    meta = record.get("meta", {})
    if not isinstance(meta, dict):
        return obj  # check_raw names `meta`
    meta = dict(meta)
    kept = meta.get("extra")
    if kept is not None and not isinstance(kept, dict):
        raise _BadRecord("meta.extra: must be an object to keep unknown top-level keys")
    meta["extra"] = {**(kept or {}), **extra}
    record["meta"] = meta
    return record


# --------------------------------------------------------------------------- ShareGPT

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "system": "system", "function_call": "call", "observation": "tool",
                   "tool": "tool"}
_SHAREGPT_KEYS = frozenset(("conversations", "system", "tools", "id", "source"))


def convert_sharegpt(obj: dict, default_id: str) -> dict:
    conv = obj["conversations"]
    if not isinstance(conv, list):
        raise _BadRecord(f"conversations: must be a list, not {_json_type(conv)}")
    given = _tools_from(obj.get("tools"), "tools")
    synth = _ToolSynth()
    messages: list[dict] = []
    system = obj.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise _BadRecord(f"system: must be a string, not {_json_type(system)}")
        if system:
            messages.append({"role": "system", "content": system})
    pending: list[str] = []
    n_calls = 0
    for i, turn in enumerate(conv):
        where = f"conversations[{i}]"
        if not isinstance(turn, dict):
            raise _BadRecord(f"{where}: must be an object, not {_json_type(turn)}")
        speaker = turn.get("from", turn.get("role"))
        value = turn.get("value", turn.get("content"))
        if speaker is None:
            raise _BadRecord(f"{where}: missing 'from'")
        role = _SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            raise _BadRecord(f"{where}.from: unknown speaker {speaker!r} (expected one of "
                             f"{', '.join(_SHAREGPT_ROLES)})")
        if role == "call":
            calls = _as_list(value, f"{where}.value", "function_call")
            if not isinstance(calls, list) or not calls:
                raise _BadRecord(f"{where}.value: function_call must be an object "
                                 "{name, arguments} or a non-empty list of them")
            tool_calls = []
            for j, call in enumerate(calls):
                cw = f"{where}.value[{j}]"
                if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
                    raise _BadRecord(f"{cw}: a function_call needs a string 'name'")
                args = _arguments_json(call.get("arguments", call.get("parameters")), f"{cw}.arguments")
                synth.see(call["name"], _parsed_args(args))
                call_id = f"call_{n_calls}"
                n_calls += 1
                pending.append(call_id)
                tool_calls.append({"id": call_id, "type": "function",
                                   "function": {"name": call["name"], "arguments": args}})
            messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
        elif role == "tool":
            if not pending:
                raise _BadRecord(f"{where}: observation answers no earlier function_call")
            results = [value]
            if len(pending) > 1 and isinstance(value, str):
                try:
                    parsed = json.loads(value)
                except ValueError:
                    parsed = None
                if isinstance(parsed, list) and len(parsed) == len(pending):
                    results = parsed
            for result in results:
                text = result if isinstance(result, str) else canonical_json(result)
                messages.append({"role": "tool", "tool_call_id": pending.pop(0), "content": text})
        else:
            if not isinstance(value, str):
                raise _BadRecord(f"{where}.value: must be a string, not {_json_type(value)}")
            messages.append({"role": role, "content": value})
    rid = obj.get("id", default_id)
    if isinstance(rid, int) and not isinstance(rid, bool):
        rid = str(rid)
    source = obj.get("source") if isinstance(obj.get("source"), str) else "sharegpt"
    meta: dict[str, Any] = {"origin_format": "sharegpt"}
    extra = {k: obj[k] for k in obj if k not in _SHAREGPT_KEYS}
    if extra:
        meta["extra"] = extra
    return {"id": rid, "source": source, "task": _first_user_text(messages),
            "tools": given or synth.tools(), "messages": messages,
            "outcome": {"success": None, "reward": None}, "meta": meta}


# --------------------------------------------------------------------------- ADP

_ADP_KEYS = frozenset(("id", "content", "details", "schema_version", "available_apis",
                       "available_custom_tools", "available_code_languages", "tools"))
_LANG_ALIASES = {"py": "python", "python3": "python", "python4": "python", "ipython": "python",
                 "sh": "bash", "shell": "bash", "console": "bash", "commandline": "bash",
                 "cmd": "bash", "js": "javascript", "node": "javascript", "ts": "typescript"}
_OBS_SOURCES = {"user": "user", "environment": "environment", "agent": "assistant",
                "assistant": "assistant", "system": "system"}


def _adp_class(item: Mapping) -> str:
    cls = item.get("class_")
    if not isinstance(cls, str):
        return ""
    # Tolerate the CamelCase spelling (ApiAction -> api_action).
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower() if cls[:1].isupper() else cls


def code_tool_name(language: str) -> str:
    lang = language.strip().lower()
    lang = _LANG_ALIASES.get(lang, lang)
    return "execute_" + (re.sub(r"[^a-z0-9]+", "_", lang).strip("_") or "code")


def _adp_str(item: Mapping, key: str, where: str, required: bool = True) -> str | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        what = "missing" if value is None else f"must be a string, not {_json_type(value)}"
        raise _BadRecord(f"{where}.{key}: {what}")
    return value


def _web_text(item: Mapping, where: str) -> str:
    parts = []
    for key, label in (("url", "URL"), ("axtree", None), ("html", None)):
        value = item.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise _BadRecord(f"{where}.{key}: must be a string, not {_json_type(value)}")
        if key == "html" and item.get("axtree"):
            continue  # the accessibility tree already says it, far shorter
        parts.append(f"{label}: {value}" if label else value)
    return "\n".join(parts)


def convert_adp(obj: dict, default_id: str) -> dict:
    content = obj["content"]
    if not isinstance(content, list):
        raise _BadRecord(f"content: must be a list, not {_json_type(content)}")
    details = obj.get("details", {})
    if not isinstance(details, dict):
        raise _BadRecord(f"details: must be an object, not {_json_type(details)}")
    given = _tools_from(obj.get("tools", details.get("tools")), "tools")
    synth = _ToolSynth()
    messages: list[dict] = []
    pending: list[str] = []          # our call ids awaiting a result, in call order
    id_map: dict[str, str] = {}      # ADP tool_call_id -> our call id
    used_ids: set[str] = set()
    steps: list[dict] = []
    n_calls = 0
    prev_was_call = False
    for j, item in enumerate(content):
        where = f"content[{j}]"
        if not isinstance(item, dict):
            raise _BadRecord(f"{where}: must be an object, not {_json_type(item)}")
        cls = _adp_class(item)
        is_call = cls in ("api_action", "code_action")
        if is_call:
            if cls == "api_action":
                name = _adp_str(item, "function", where)
                if not name:
                    raise _BadRecord(f"{where}.function: empty function name")
                kwargs = item.get("kwargs", {})
                if not isinstance(kwargs, dict):
                    raise _BadRecord(f"{where}.kwargs: must be an object, not {_json_type(kwargs)}")
            else:
                lang = _adp_str(item, "language", where)
                name = code_tool_name(lang)
                kwargs = {"code": _adp_str(item, "content", where)}
            synth.see(name, kwargs)
            adp_id = item.get("tool_call_id")
            if adp_id is not None and not isinstance(adp_id, str):
                raise _BadRecord(f"{where}.tool_call_id: must be a string, not {_json_type(adp_id)}")
            call_id = adp_id if adp_id and adp_id not in used_ids else None
            while call_id is None or call_id in used_ids:
                call_id = f"call_{n_calls}"
                n_calls += 1
            used_ids.add(call_id)
            if adp_id:
                id_map[adp_id] = call_id
            pending.append(call_id)
            call = {"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": canonical_json(kwargs)}}
            thought = _adp_str(item, "description", where, required=False)
            if prev_was_call and not thought and messages and messages[-1].get("tool_calls"):
                messages[-1]["tool_calls"].append(call)   # parallel calls: one assistant turn
            else:
                messages.append({"role": "assistant", "content": thought or None,
                                 "tool_calls": [call]})
        elif cls == "message_action":
            messages.append({"role": "assistant", "content": _adp_str(item, "content", where)})
        elif cls in ("text_observation", "web_observation", "image_observation"):
            if cls == "text_observation":
                text = _adp_str(item, "content", where)
            elif cls == "web_observation":
                text = _web_text(item, where)
            else:
                text = f"[image: {_adp_str(item, 'content', where)}]"
            source = item.get("source", "environment")
            role = _OBS_SOURCES.get(source) if isinstance(source, str) else None
            if role is None:
                raise _BadRecord(f"{where}.source: unknown source {source!r} (expected user, "
                                 "environment or agent)")
            adp_id = item.get("tool_call_id")
            if adp_id is not None:
                if not isinstance(adp_id, str) or adp_id not in id_map:
                    raise _BadRecord(f"{where}.tool_call_id: {adp_id!r} answers no earlier action")
                call_id = id_map.pop(adp_id)
                if call_id not in pending:
                    raise _BadRecord(f"{where}.tool_call_id: {adp_id!r} was already answered")
                pending.remove(call_id)
                messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
            elif role == "environment" and pending:
                messages.append({"role": "tool", "tool_call_id": pending.pop(0), "content": text})
            else:
                # Environment text with no call to answer (e.g. the first page) reads as user input.
                messages.append({"role": "user" if role == "environment" else role, "content": text})
        else:
            raise _BadRecord(f"{where}.class_: unknown ADP class {item.get('class_')!r} (expected "
                             "api_action, code_action, message_action, text_observation, "
                             "web_observation or image_observation)")
        prev_was_call = is_call
        step = {k: item[k] for k in ("reasoning_content", "reward") if item.get(k) is not None}
        if step:
            steps.append({"content_index": j, "message_index": len(messages) - 1, **step})
    for key in ("available_custom_tools", "available_apis"):
        names = obj.get(key)
        if names is not None:
            if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
                raise _BadRecord(f"{key}: must be a list of tool names")
            for n in names:
                synth.add_name(n)
    rid = obj.get("id", default_id)
    if isinstance(rid, int) and not isinstance(rid, bool):
        rid = str(rid)
    adp_meta: dict[str, Any] = {"details": details}
    for key in ("schema_version", "available_code_languages"):
        if key in obj:
            adp_meta[key] = obj[key]
    if steps:
        adp_meta["steps"] = steps
    meta: dict[str, Any] = {"origin_format": "adp", "adp": adp_meta}
    extra = {k: obj[k] for k in obj if k not in _ADP_KEYS}
    if extra:
        meta["extra"] = extra
    source = details.get("dataset") if isinstance(details.get("dataset"), str) else "adp"
    return {"id": rid, "source": source, "task": _first_user_text(messages),
            "tools": given or synth.tools(), "messages": messages,
            "outcome": {"success": None, "reward": None}, "meta": meta}


# --------------------------------------------------------------------------- loading


def convert_record(obj: Any, fmt: str = "auto", default_id: str = "") -> tuple[dict, str]:
    """One parsed JSON value -> (valid canonical record, its format); raises _BadRecord."""
    if not isinstance(obj, dict):
        raise _BadRecord(f"not a JSON object (got {_json_type(obj)})")
    kind = detect_format(obj) if fmt == "auto" else fmt
    if kind is None:
        raise _BadRecord("unrecognised record: expected 'messages' (canonical), 'conversations' "
                         "(ShareGPT) or an ADP 'content' list of actions and observations")
    if kind == "canonical":
        record = convert_canonical(obj)
    elif kind == "sharegpt":
        if "conversations" not in obj:
            raise _BadRecord("conversations: missing (format sharegpt)")
        record = convert_sharegpt(obj, default_id)
    else:
        if "content" not in obj:
            raise _BadRecord("content: missing (format adp)")
        record = convert_adp(obj, default_id)
    error = check_raw(record)
    if error:
        raise _BadRecord(error if kind == "canonical" else
                         f"{error} (in the canonical record converted from {kind})")
    return record, kind


def _as_paths(paths) -> list[str]:
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    out = [os.fsdecode(p) for p in paths]
    if not out:
        raise UserError("no corpus file given")
    return out


def _combined_sha256(digests: list[tuple[str, str]]) -> str:
    if len(digests) == 1:
        return digests[0][1]
    return hashlib.sha256("".join(f"{n}\0{s}\n" for n, s in digests).encode("utf-8")).hexdigest()


def corpus_sha256(paths) -> str:
    """The corpus hash `load_corpus` would record, from the bytes alone (nothing is parsed)."""
    return _combined_sha256([(os.path.basename(p), file_sha256(p)) for p in _as_paths(paths)])


def load_corpus(paths, fmt: str = "auto", on_error: str = "abort",
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Corpus:
    """Load one or several JSONL files into canonical raw records, in file order.

    `sha256` is the sha256 of the file's bytes for one file; for several, the sha256 of the
    lines `f"{basename}\\0{file_sha}\\n"` in the given order. Ids must be unique across files.
    """
    if fmt not in ("auto", *FORMATS):
        raise UserError(f"unknown corpus format {fmt!r} (expected auto, {', '.join(FORMATS)})")
    if on_error not in ("abort", "skip"):
        raise UserError(f"unknown on_error {on_error!r} (expected abort or skip)")
    path_list = _as_paths(paths)
    records: list[dict] = []
    skipped: list[str] = []
    kinds: set[str] = set()
    first_seen: dict[str, tuple[str, int]] = {}
    digests: list[tuple[str, str]] = []

    def bad(path: str, lineno: int, reason: str) -> None:
        line = f"{path}:{lineno}: {reason}"
        if on_error == "abort":
            raise UserError(line)
        skipped.append(line)

    for path in path_list:
        base = os.path.basename(path)
        hasher = hashlib.sha256()
        n_lines = 0
        for lineno, line, error in iter_lines(path, max_line_bytes, hasher=hasher):
            n_lines += 1
            if error is not None:
                bad(path, lineno, error)
                continue
            try:
                record, kind = convert_record(_parse(line), fmt, f"{base}:{lineno}")
            except _BadRecord as exc:
                bad(path, lineno, str(exc))
                continue
            rid = record["id"]
            seen = first_seen.get(rid)
            if seen is not None:
                where = f"line {seen[1]}" if seen[0] == path else f"{seen[0]}:{seen[1]}"
                bad(path, lineno, f"duplicate id {rid!r}, first seen at {where}")
                continue
            first_seen[rid] = (path, lineno)
            kinds.add(kind)
            records.append(record)
        if n_lines == 0:
            bad(path, 1, "empty file, no records")
        digests.append((base, hasher.hexdigest()))
    if not records:
        first = f"; first: {skipped[0]}" if skipped else ""
        raise UserError(f"{', '.join(path_list)}: no valid records ({len(skipped)} lines "
                        f"skipped{first})")
    sha = _combined_sha256(digests)
    fmt_name = kinds.pop() if len(kinds) == 1 else "mixed"
    return Corpus(records=records, sha256=sha, paths=tuple(path_list), format=fmt_name,
                  skipped=tuple(skipped))
