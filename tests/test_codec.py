"""base.codec: msgspec writes the bytes canonical_json writes, on every code point, key order,
integers of any size, and floats of every magnitude as json's decoder (STANDARD) read them."""
from __future__ import annotations

import json
import math
import random
import struct

import pytest

from base import codec
from base.canonical import canonical_json


def _round_trip(text: str) -> bytes:
    return codec.encode(codec.STANDARD.decode(text))


def test_every_code_point_is_written_as_canonical_json_writes_it():
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(points), 64):
        text = "".join(points[i:i + 64])
        value = {text: text, "k" + text[::-1]: [text]}
        assert codec.encode(value) == canonical_json(value).encode("utf-8")
    for c in points[:0x3000]:   # each of the escaped and the common ones alone
        assert codec.encode({c: c}) == canonical_json({c: c}).encode("utf-8")


def test_keys_are_sorted_as_json_sorts_them_and_integers_of_any_size_are_kept():
    rng = random.Random(1)
    pool = ["a", "B", "é", "\U0001F600", "\uffff", "\u00ff", "Z", "_", "0", " ", "\x00", "\x7f", "\u2028", "\ue000"]
    for _ in range(5_000):
        value = {"".join(rng.choice(pool) for _ in range(rng.randint(0, 4))):
                 rng.choice([rng.randint(-2**70, 2**70), True, False, None, [], {}, -0, 2**63, -2**63 - 1])
                 for _ in range(rng.randint(0, 8))}
        assert codec.encode(value) == canonical_json(value).encode("utf-8")
    for digits in (1, 19, 20, 100, 4300):
        text = "-" + "9" * digits
        assert _round_trip(f"[{text}]") == canonical_json(json.loads(f"[{text}]")).encode()


def _floats():
    rng = random.Random(0)
    yield from (0.0, -0.0, 1.0, 1e-4, 1e-5, 1e15, 1e16, 1e17, 123456789012345.6, 1.5e16, 9999999999999998.0,
                5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 1 / 3, 1e22, 1e21, 100.0)
    for _ in range(15_000):
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(x):
            yield x
    for _ in range(15_000):
        yield round(rng.uniform(-1e6, 1e6), rng.randint(0, 8))
    for exponent in range(-323, 308):
        for mantissa in (1, 2, 5, 9.99, 1.5):
            yield mantissa * 10.0 ** exponent


def test_every_float_read_is_written_back_as_json_writes_it():
    """msgspec's own float form differs (1e-05 as 0.00001): what the codec read, it writes as repr."""
    for x in _floats():
        for value in (x, -x, [x], {"v": x}):
            text = json.dumps(value)
            assert _round_trip(text) == canonical_json(json.loads(text)).encode(), text
            assert repr(codec.STANDARD.decode(text)) == repr(json.loads(text))   # ParsedFloat's repr is float's
    for text in ("1E5", "1e-2", "-0.0", "2e-400", "1.5E+300", "0.000001", "12.50"):
        assert _round_trip(text) == canonical_json(json.loads(text)).encode()


def test_non_finite_floats_and_lone_surrogates_are_refused_as_canonical_json_refuses_them():
    with pytest.raises(ValueError, match="Out of range"):
        codec.encode(codec.STANDARD.decode('{"x": [1e400]}'))   # read as inf, as json reads it
    with pytest.raises(UnicodeEncodeError):
        codec.encode({"x": "\ud800"})
    # why a float the codec did not read must never reach it: msgspec writes it in its own form
    assert codec.encode([1e-05]) == b"[0.00001]" != canonical_json([1e-05]).encode()
