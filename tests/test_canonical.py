"""sandbox.canonical: the field-by-field reader and encoder give what the plain decoder and
`canonical_json` give, byte for byte, on awkward input; a repeated tool list is parsed and
encoded once; the checker's verdicts do not depend on it."""
from __future__ import annotations

import io
import json

import pytest

from sandbox import canonical, checker
from sandbox.canonical import FieldReader, canonical_json, record_json, shared_json
from sandbox.provenance import digest, settle

DECODER = checker._DECODER
TOOLS = [{"type": "function", "function": {"name": "f", "description": "é " * 200,
                                           "parameters": {"type": "object", "properties": {"x": {"default": 1.5e-7}}}}}]
AWKWARD = [
    {"id": "a", "z": "ünïcødé \u2028 \x7f \x00 \" \\ /", "tools": TOOLS, "n": [1.0, -0.0, 1e16, 2**70, 1e-5]},
    {"id": "b", "tools": TOOLS, "meta": {"é": {"b": [], "a": {}}, "": None, "A": True}},
    {},
    {"id": "c", "deep": [[[[[[{"k": [1, 2]}]]]]]], "tools": [[[[]]]]},
]


@pytest.mark.parametrize("record", AWKWARD)
def test_record_json_is_canonical_json(record):
    assert record_json(record) == canonical_json(record)
    text = json.dumps(record, indent=1) + " \n"   # other whitespace than the canonical form
    read = FieldReader(DECODER).read(text)
    assert read is not None and read[0] == DECODER.decode(text)
    assert record_json(read[0]) == canonical_json(record)
    assert all(DECODER.decode(raw) == read[0][key] for key, raw in read[1])


def test_a_repeated_tool_list_is_one_shared_object_encoded_once():
    reader = FieldReader(DECODER)
    line = json.dumps({"id": "r1", "tools": TOOLS})
    first, _ = reader.read(line)
    second, fields = reader.read(line.replace('"r1"', '"r2"'))
    assert first["tools"] is second["tools"] and canonical.is_shared(second["tools"])
    assert shared_json(first["tools"]) is shared_json(second["tools"]) == canonical_json(TOOLS)
    assert dict(fields)["tools"] == json.dumps(TOOLS)
    assert record_json(second) == canonical_json({"id": "r2", "tools": TOOLS})
    mine = json.loads(json.dumps(TOOLS))   # not read by a FieldReader: never taken for a shared one
    assert not canonical.is_shared(mine) and shared_json(mine) is not shared_json(first["tools"])


def test_duplicate_keys_keep_the_last_value_and_every_text():
    text = '{"a": [[1]], "b": 2, "a": 3}'
    record, fields = FieldReader(DECODER).read(text)
    assert record == DECODER.decode(text) and list(record) == ["a", "b"]
    assert [k for k, _ in fields] == ["a", "b", "a"]   # the depth check sees the dropped value too


@pytest.mark.parametrize("text", ['[1]', '{"a": 1} x', '{"a": NaN}', '{"a": 1,}', '{a: 1}', '{"a" 1}',
                                  '{"a": "\x01"}', '{"a": 1', '', '"s"', '{"a": [' * 5000 + ']' * 5000 + '}'])
def test_what_the_reader_does_not_take_goes_to_the_decoder(text):
    assert FieldReader(DECODER).read(text) is None


def test_lone_surrogates_and_nan_are_refused_as_before():
    surrogate = {"id": "s", "tools": [], "x": "\ud800"}
    assert record_json(surrogate) == canonical_json(surrogate)   # text; UTF-8 encoding refuses it
    with pytest.raises(ValueError, match="lone surrogate"):
        checker._canonical_line(surrogate)
    with pytest.raises(ValueError, match="out of range"):
        checker._canonical_line({"id": "n", "x": float("nan")})
    stamped = {"id": "p", "tools": TOOLS, "meta": {"provenance": {"steps": [], "sha": "0"}}}
    assert digest(stamped, record_json) == digest(json.loads(json.dumps(stamped)))


def _rl_line(rid: str, depth: int = 0) -> bytes:
    record = {"id": rid, "messages": [{"role": "user", "content": "q"}], "tools": TOOLS,
              "reference": {"content": "a"}, "reward": "tool_call_match", "meta": {"x": [[]] if not depth else
                                                                                      json.loads("[" * depth + "]" * depth)}}
    return (json.dumps(record) + "\n").encode()


def test_checker_verdicts_and_lines_do_not_depend_on_sharing():
    lines = [_rl_line(f"r{i}") for i in range(3)]
    out = list(checker.iter_records("rl.jsonl", io.BytesIO(b"".join(lines))))
    assert [line for _, line in out] == [checker._canonical_line(settle(json.loads(raw))) for raw in lines]
    deep = _rl_line("d", depth=checker.CAPS.max_depth - 1)   # the record and meta are two levels more
    with pytest.raises(checker.CandidateRejected, match="rl.jsonl:2: objects and arrays nested deeper than 64"):
        list(checker.iter_records("rl.jsonl", io.BytesIO(lines[0] + deep)))
    list(checker.iter_records("rl.jsonl", io.BytesIO(lines[0] + _rl_line("e", depth=checker.CAPS.max_depth - 2))))
