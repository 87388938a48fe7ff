"""The host's JSON writer: msgspec, several times faster than the standard library, writing the
bytes `canonical_json` writes; and the reader whose values it may be given.

    STANDARD        json's decoder as the checker has always read records (NaN and Infinity
                    refused), floats as ParsedFloat
    encode(value)   canonical JSON bytes of a value STANDARD read (or one made of such values)

The bytes are canonical_json's because msgspec writes strings, integers, booleans, null, arrays
and objects with sorted keys exactly as json.dumps(sort_keys=True, ensure_ascii=False,
separators=(",", ":")) does (tests/test_codec.py: every code point, key order, integers of any
size). Floats it writes in a shortest form of its own (1e-05 as 0.00001), so every float read by
STANDARD is a `ParsedFloat`, which the writer writes as Python's repr, as json does. The checker
encodes only what it read this way and the strings, booleans and lists it adds: never a float of
its own (msgspec would write it in its form, and no hook would see it).

Reading stays json's: msgspec reads no faster here, where the records' tool lists, most of their
bytes, are parsed once per trajectory anyway (base.canonical.FieldReader).
"""
from __future__ import annotations

import json
import math
from typing import Any

import msgspec


class ParsedFloat(float):
    """A float as read: written back as Python's repr (msgspec asks `_write`, json calls float's repr)."""

    __slots__ = ()


def _write(value: Any) -> msgspec.Raw:
    if type(value) is ParsedFloat:
        if not math.isfinite(value):   # 1e400 reads as inf, as json reads it; neither writes it
            raise ValueError("Out of range float values are not JSON compliant")
        return msgspec.Raw(float.__repr__(value).encode())
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _reject_constant(token: str):
    raise ValueError(f"{token} is not valid JSON")


STANDARD = json.JSONDecoder(parse_constant=_reject_constant, parse_float=ParsedFloat)
_ENCODER = msgspec.json.Encoder(order="sorted", enc_hook=_write)


def encode(value: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, compact, UTF-8) of a value STANDARD read: ValueError for
    a non-finite float, UnicodeEncodeError for a lone surrogate, RecursionError past msgspec's
    depth, as canonical_json and its UTF-8 encoding raise them."""
    return _ENCODER.encode(value)
