"""base.canonical: the field-by-field reader and encoder give what the plain decoder and
`canonical_json` give, byte for byte, on awkward input; a repeated tool list is parsed and
encoded once; the checker's verdicts do not depend on it."""
from __future__ import annotations

import io
import json
import os

import pytest

from base import canonical, codec
from sandbox import artifact_records, checker
from base.canonical import FieldReader, canonical_json, record_bytes, shared_json
from base.provenance import digest, settle

DECODER = codec.STANDARD

TOOLS = [{"type": "function", "function": {"name": "f", "description": "é " * 200,
                                           "parameters": {"type": "object", "properties": {"x": {"default": 1.5e-7}}}}}]
AWKWARD = [
    {"id": "a", "z": "ünïcødé \u2028 \x7f \x00 \" \\ /", "tools": TOOLS, "n": [1.0, -0.0, 1e16, 2**70, 1e-5]},
    {"id": "b", "tools": TOOLS, "meta": {"é": {"b": [], "a": {}}, "": None, "A": True}},
    {},
    {"id": "c", "deep": [[[[[[{"k": [1, 2]}]]]]]], "tools": [[[[]]]]},
]


def _line(record) -> bytes:
    """A record line as the sandbox's runtime writes it (sandbox.runtime.write_records)."""
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def _canonical(record) -> bytes:
    return canonical_json(record).encode("utf-8")


@pytest.mark.parametrize("record", AWKWARD)
def test_record_bytes_are_canonical_json(record):
    text = json.dumps(record, indent=1) + " \n"   # other whitespace than the canonical form
    read = FieldReader(DECODER).read(text)
    assert read is not None and read[0] == DECODER.decode(text)
    assert record_bytes(read[0]) == _canonical(record)
    assert all(DECODER.decode(raw) == read[0][key] for key, raw in read[1])


def test_a_repeated_tool_list_is_one_shared_object_encoded_once():
    reader = FieldReader(DECODER)
    line = json.dumps({"id": "r1", "tools": TOOLS})
    first, _ = reader.read(line)
    second, fields = reader.read(line.replace('"r1"', '"r2"'))
    assert first["tools"] is second["tools"] and canonical.is_shared(second["tools"])
    assert shared_json(first["tools"]) is shared_json(second["tools"]) == canonical_json(TOOLS)
    assert dict(fields)["tools"] == json.dumps(TOOLS)
    assert record_bytes(second) == _canonical({"id": "r2", "tools": TOOLS})
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
    with pytest.raises(ValueError, match="lone surrogate"):
        artifact_records._canonical_line(surrogate)
    with pytest.raises(ValueError, match="out of range"):
        artifact_records._canonical_line(DECODER.decode('{"id": "n", "x": 1e400}'))   # read as inf, as json reads it
    stamped = DECODER.decode(json.dumps({"id": "p", "tools": TOOLS, "meta": {"provenance": {"steps": [], "sha": "0"}}}))
    assert digest(stamped, record_bytes) == digest(json.loads(json.dumps(stamped)))


def _rl_line(rid: str, depth: int = 0) -> bytes:
    record = {"id": rid, "messages": [{"role": "user", "content": "q"}], "tools": TOOLS,
              "reference": {"content": "a"}, "reward": "tool_call_match", "meta": {"x": [[]] if not depth else
                                                                                      json.loads("[" * depth + "]" * depth)}}
    return (json.dumps(record) + "\n").encode()


def test_checker_verdicts_and_lines_do_not_depend_on_sharing():
    lines = [_rl_line(f"r{i}") for i in range(3)]
    out = list(checker.iter_records("rl.jsonl", io.BytesIO(b"".join(lines))))
    assert [line for _, line in out] == [_canonical(settle(json.loads(raw))) + b"\n" for raw in lines]
    deep = _rl_line("d", depth=checker.CAPS.max_depth - 1)   # the record and meta are two levels more
    with pytest.raises(checker.CandidateRejected, match="rl.jsonl:2: objects and arrays nested deeper than 64"):
        list(checker.iter_records("rl.jsonl", io.BytesIO(lines[0] + deep)))
    list(checker.iter_records("rl.jsonl", io.BytesIO(lines[0] + _rl_line("e", depth=checker.CAPS.max_depth - 2))))


FLOATS = [1e-05, 1e16, 1.5e300, 0.1, -0.0, 100.0, 5e-324, 2**70, -(2**63), True, None]   # msgspec's own forms differ


@pytest.mark.parametrize("kind", ["sft", "rl", "memory"])
def test_rows_holding_floats_are_written_as_canonical_json_writes_them(kind):
    from sandbox.exchange import to_file

    tools = [{**TOOLS[0], "x": FLOATS, "function": {**TOOLS[0]["function"], "strict": 1e-07}}]
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1e-05}'}}
    base = {"sft": {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}],
                    "tools": tools, "weights": [1]},
            "rl": {"messages": [{"role": "user", "content": "q"}], "tools": tools, "reference": {"tool_calls": [call]},
                   "reward": "tool_call_match"},
            "memory": {"key": "k", "content": "c", "tags": ["t"]}}[kind]
    records = [{"id": f"r{i}", **base, "meta": {"n": FLOATS, "e": {"f": [1e-05 * i, {"g": 1e22}]},
                                                 "provenance": {"steps": [{"op": "x", "how": "kept"}]}}} for i in range(3)]
    for record in records:   # stamped as the toolkit stamps: the host's digest must find them intact
        record["meta"]["provenance"]["sha"] = digest(record)
    lines = [_line(r) for r in records]
    out = list(checker.iter_records(f"{kind}.jsonl", io.BytesIO(b"".join(lines)), encode=to_file))
    expected = [canonical_json(to_file(kind, settle(json.loads(raw)))).encode() + b"\n" for raw in lines]
    assert [line for _, line in out] == expected and b"1e-05" in expected[0] and b"1e+16" in expected[0]
    assert all(record["meta"]["provenance"] == [{"op": "x", "how": "kept"}] for record, _ in out)


@pytest.mark.parametrize("messages", [
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q é"}, {"role": "tool", "content": "1"}],
    [{"role": "user", "content": "q"}],
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": []}, {"role": "user", "content": "r"}],
])
def test_an_rl_row_spliced_from_the_digest_text_is_the_plain_encoding(messages):
    from chat_format.chat_format import tools_in_system
    from sandbox.exchange import to_file

    record = DECODER.decode(json.dumps({"id": "r", "messages": messages, "tools": TOOLS, "reference": {"content": "a"},
                                        "reward": "tool_call_match", "meta": {"provenance": [{"op": "x", "how": "kept"}]}}))
    row = to_file("rl", record)
    assert row["prompt"] == tools_in_system(messages, TOOLS)
    plain = _canonical({**row, "prompt": list(row["prompt"])})
    texts: dict = {}
    record_bytes(record, texts)   # the digest's encoding, remembered for the row
    assert record_bytes(row, texts) == plain == record_bytes(row) == _canonical(row)


def test_the_hashing_writer_writes_and_hashes_every_byte_and_raises_a_write_failure(tmp_path):
    import hashlib

    from base.files import HashingWriter

    data = [bytes([i % 251]) * (i * 37) for i in range(300)]
    with HashingWriter(tmp_path / "f", block=4096) as out:
        for chunk in data:
            out.write(chunk)
    assert (tmp_path / "f").read_bytes() == b"".join(data)
    assert out.hexdigest() == hashlib.sha256(b"".join(data)).hexdigest()
    with pytest.raises(RuntimeError, match="stop"):
        with HashingWriter(tmp_path / "g", block=16) as out:
            out.write(b"x" * 100)
            raise RuntimeError("stop")
    assert not out.thread.is_alive() and out.file.closed
    with pytest.raises(OSError):   # the device is full: the thread's failure reaches the caller
        with HashingWriter("/dev/full", block=1 << 16) as out:
            for _ in range(8):
                out.write(b"x" * (1 << 16))


def test_a_hashing_writer_appends_a_file_between_writes(tmp_path):
    """write_file: the file's bytes where they fall among the writes, in the file and in the hash."""
    import hashlib

    from base.files import HashingWriter

    part = tmp_path / "part"
    part.write_bytes(bytes(range(256)) * 40_000)
    with HashingWriter(tmp_path / "f", block=4096) as out:
        out.write(b"head" * 3000)
        out.write_file(part)
        out.write(b"tail")
        (tmp_path / "empty").touch()
        out.write_file(tmp_path / "empty")
    whole = b"head" * 3000 + part.read_bytes() + b"tail"
    assert (tmp_path / "f").read_bytes() == whole
    assert out.hexdigest() == hashlib.sha256(whole).hexdigest()
    with HashingWriter(tmp_path / "g", block=4096) as again:   # a scratch file: its disk given back as it is copied
        again.write(b"head" * 3000)
        again.write_file(part, scratch=True)
        again.write(b"tail")
    assert (tmp_path / "g").read_bytes() == whole and again.hexdigest() == out.hexdigest()
    assert part.stat().st_size == 256 * 40_000 and part.stat().st_blocks * 512 <= 4096   # a partial last block


def test_free_blocks_gives_back_what_was_read_and_nothing_else(tmp_path):
    from base.files import free_blocks, free_file, scratch_writer

    path = tmp_path / "scratch"
    path.write_bytes(b"a" * (1 << 20) + b"b" * (1 << 20) + b"c")
    reading = os.open(path, os.O_RDONLY)
    writer = scratch_writer(reading)
    assert free_blocks(writer, 0, 1 << 20)
    assert os.pread(reading, 4, 0) == b"\0" * 4 and os.pread(reading, 4, 1 << 20) == b"bbbb"
    assert path.stat().st_size == (2 << 20) + 1 and path.stat().st_blocks * 512 < (1 << 20) + 8192
    assert not free_blocks(reading, 1 << 20, 2 << 20)   # a descriptor open for reading only: nothing changes
    assert os.pread(reading, 4, 1 << 20) == b"bbbb"
    assert free_file(writer) and path.stat().st_blocks == 0
    os.link(path, tmp_path / "another name")
    assert scratch_writer(reading) is None   # a file with two names is not a scratch file
    os.close(writer)
    os.close(reading)


def test_memoised_argument_verdicts_are_the_verdicts():
    from base import schemas

    tools = [{"type": "function", "function": {"name": "f"}}]
    for arguments, why in (("{}", None), ("[1]", "must be a JSON object, not list"), ("{", "not JSON (Expecting"),
                           ("NaN", "must be a JSON object, not float")):
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
        messages = [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}]
        for _ in range(2):   # the second from the memo
            error = schemas.check_messages(messages, tools)
            assert (error is None) if why is None else why in error
