"""Canonical JSON, and the host's way of not encoding a repeated part of records again.

Canonical JSON is the one serialisation of a record: sorted keys, compact, UTF-8 text, NaN
refused (`canonical_json`). The records of one trajectory repeat its tool list (every RL prefix
carries it, and the file form carries it two more times: `tools`, `tool_list`), so most of the
bytes the host checks are the same few lists. `FieldReader` parses a record's top-level fields
with the standard decoder and hands out one parsed object for a field whose text it has seen
before; such objects are registered as shared, and `@shared` functions of them (their encoding,
their schema verdict, their nesting depth) run once per object. `record_bytes` encodes a record
field by field with the host's codec (base.codec), so a shared field is spliced in, byte for
byte what `canonical_json` writes.

Only objects the host parsed (with base.codec.STANDARD: floats as ParsedFloat) and never
changes are registered, and what `@shared` functions make of them: a function of anything else is
computed as usual (a strategy's own lists may change between calls).
"""
from __future__ import annotations

import functools
import json
from collections import OrderedDict
from json.decoder import WHITESPACE, scanstring
from typing import Any, Callable

from base import codec

_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
SHARED_MAX = 256         # shared objects remembered (with what was computed of them)
SHARED_MIN_CHARS = 256   # a shorter field is parsed again rather than looked up


def canonical_json(obj: Any) -> str:
    """The one serialisation of a record: sorted keys, compact, UTF-8 text, NaN refused."""
    return _CANONICAL.encode(obj)


_REGISTRY: OrderedDict[int, tuple[Any, dict]] = OrderedDict()   # id → (object, {(fn, args): result})


def share(obj: Any) -> Any:
    """Register `obj` as shared: the caller promises it is not changed while it is used, and that
    it was read by base.codec.STANDARD (or made of what was: the codec writes its floats)."""
    entry = _REGISTRY.get(id(obj))
    if entry is None or entry[0] is not obj:
        _REGISTRY[id(obj)] = (obj, {})
        if len(_REGISTRY) > SHARED_MAX:
            _REGISTRY.popitem(last=False)
    else:
        _REGISTRY.move_to_end(id(obj))
    return obj


def is_shared(obj: Any) -> bool:
    entry = _REGISTRY.get(id(obj))
    return entry is not None and entry[0] is obj


def shared(fn: Callable) -> Callable:
    """`fn(obj, *args)` once per shared `obj` (and arguments); its result is shared in turn. For an
    object not registered, `fn` is simply called. The registry keeps each object alive, so an
    id is never another object's while its entry lasts."""
    @functools.wraps(fn)
    def memoised(obj, *args, **kwargs):
        entry = _REGISTRY.get(id(obj))
        if entry is None or entry[0] is not obj:
            return fn(obj, *args, **kwargs)
        results, key = entry[1], (fn, args, tuple(sorted(kwargs.items()))) if kwargs else (fn, args)
        if key not in results:
            result = results[key] = fn(obj, *args, **kwargs)
            if isinstance(result, (str, list, dict)):
                share(result)
        return results[key]
    return memoised


shared_bytes = shared(codec.encode)   # canonical JSON bytes of what the codec read


@shared
def _shared_text(obj: Any) -> str:
    return shared_bytes(obj).decode("utf-8")


def shared_json(obj: Any) -> str:
    """`canonical_json(obj)`; of a shared object once, written by the codec (its floats were read)."""
    return _shared_text(obj) if is_shared(obj) else canonical_json(obj)


REPEATED = ("messages", "reference")   # what a record and its file row (and its digest) hold alike


def record_bytes(record: dict, texts: dict | None = None) -> bytes:
    """`canonical_json(record)` in UTF-8 for a dict base.codec.STANDARD read (its floats), its
    shared fields encoded once: the encoder writes an object as its sorted `"key":value` pairs, so
    field by field gives the same bytes. `texts` ({} per record) remembers the bytes of its
    REPEATED values by object, for the next encoding of the same record (its digest, then its
    row): the caller keeps them unchanged meanwhile."""
    if any(type(k) is not str for k in record):
        return canonical_json(record).encode("utf-8")
    return b"{" + b",".join(_key_json(k) + b":" + _value_json(k, record[k], texts) for k in sorted(record)) + b"}"


_KEYS: dict[str, bytes] = {}


def _key_json(key: str) -> bytes:
    text = _KEYS.get(key)
    if text is None:
        text = codec.encode(key)
        if len(_KEYS) < 1024:
            _KEYS[key] = text
    return text


def _value_json(key: str, value: Any, texts: dict | None) -> bytes:
    if type(value) is Joined:
        return value.json(texts)
    if texts is None or key not in REPEATED:
        return shared_bytes(value)
    seen = texts.get(id(value))
    if seen is not None and seen[0] is value:
        return seen[1]
    text = texts[id(value)] = (value, shared_bytes(value))   # the object kept: its id is not reused meanwhile
    return text[1]


class Joined(list):
    """The list `head + source[start:]`, whose canonical bytes are cut from the source's when the
    source's are known (`record_bytes`'s texts): a file row's RL prompt is the system message with
    the tools, then the record's messages. Not to be changed once made."""

    def __init__(self, head: list, source: list, start: int):
        super().__init__([*head, *source[start:]])
        self.head, self.source, self.start = head, source, start

    def json(self, texts: dict | None) -> bytes:
        seen = (texts or {}).get(id(self.source))
        if seen is None or seen[0] is not self.source or len(self) != len(self.head) + len(self.source) - self.start:
            return shared_bytes(self)
        # the source's bytes are "[" e0 "," e1 … "]": past its first `start` elements, its inner part
        cut = 1 + sum(len(shared_bytes(e)) + 1 for e in self.source[:self.start])
        parts = [shared_bytes(e) for e in self.head]
        if len(self.source) > self.start:
            parts.append(seen[1][cut:-1])
        return b"[" + b",".join(parts) + b"]"


class FieldReader:
    """Top-level fields of JSON object lines, parsed by one `json.JSONDecoder`; a field under
    `keys` whose text equals one read before is that earlier object (shared), not a new parse.
    `read` returns (record, [(key, raw text of its value)] with duplicate keys kept), or None
    for anything but a well-formed object: the caller's decoder then gives the verdict."""

    def __init__(self, decoder: json.JSONDecoder, keys: tuple[str, ...] = ("tools",), remember: int = 16):
        self.scan, self.strict, self.keys, self.remember = decoder.scan_once, decoder.strict, keys, remember
        self.seen: list[tuple[str, Any]] = []   # (text, object), most recent first

    def _value(self, key: str, text: str, i: int) -> tuple[Any, int, str]:
        if key in self.keys:
            for k, (seen_text, obj) in enumerate(self.seen):
                # a complete array or object text read from i is exactly the value there
                if text.startswith(seen_text, i):
                    if k:
                        self.seen.insert(0, self.seen.pop(k))
                    return share(obj), i + len(seen_text), share(seen_text)
        value, end = self.scan(text, i)
        raw = text[i:end]
        if key in self.keys and isinstance(value, (list, dict)) and len(raw) >= SHARED_MIN_CHARS:
            self.seen.insert(0, (share(raw), share(value)))
            del self.seen[self.remember:]
        return value, end, raw

    def read(self, text: str) -> tuple[dict, list[tuple[str, str]]] | None:
        ws = WHITESPACE.match
        i = ws(text, 0).end()
        if text[i:i + 1] != "{":
            return None
        record, fields = {}, []
        i = ws(text, i + 1).end()
        if text[i:i + 1] == "}":
            i += 1
        else:
            try:
                while True:
                    if text[i:i + 1] != '"':
                        return None
                    key, i = scanstring(text, i + 1, self.strict)
                    i = ws(text, i).end()
                    if text[i:i + 1] != ":":
                        return None
                    value, i, raw = self._value(key, text, ws(text, i + 1).end())
                    record[key] = value
                    fields.append((key, raw))
                    i = ws(text, i).end()
                    if text[i:i + 1] == "}":
                        i += 1
                        break
                    if text[i:i + 1] != ",":
                        return None
                    i = ws(text, i + 1).end()
            except (StopIteration, ValueError, RecursionError):
                return None
        return (record, fields) if ws(text, i).end() == len(text) else None
