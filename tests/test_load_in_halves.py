"""A large JSONL file is loaded in two halves at once (corpora.halves): the second by a forked child
whose results wait in a scratch file (base.forked.Spooled). Whatever the file holds, the corpus is
the one a single pass loads: records and their stored bytes, the hash, the lines left out and why,
the quirks, the catalogue, the first bad line; a lost child leaves its half to the host."""
import json
import os
import time

import pytest

from base import forked
from base.errors import UserError
from conftest import SAMPLE_CORPUS
from corpora import halves, load_corpus, loader

pytestmark = pytest.mark.skipif(not forked.available(), reason="needs a second core and fork")

SPOOLED = forked.Spooled   # the class, whatever a fixture puts in its place
LIMIT = 1 << 16   # max_line_bytes: one line of the file is longer


def _adp(i: int, rid: str = "") -> dict:
    """An ADP trajectory (ids unique within a dataset only) whose `finish` schema says `"parameters": null`."""
    return {"id": rid or str(i), "content": [
        {"class_": "text_observation", "source": "user", "content": f"fix issue {i}"},
        {"class_": "api_action", "function": "finish", "kwargs": {}, "description": "done"}],
        "tools": [{"type": "function", "function": {"name": "finish", "description": "end", "parameters": None}}]}


def _no_tools(rid: str) -> dict:
    """A canonical record with a call and no tool schemas: its tools are made from its calls."""
    return {"id": rid, "source": "calls-demo", "messages": [
        {"role": "user", "content": f"look up {rid}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"key": rid})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "assistant", "content": "done"}]}


def _corpus_lines() -> list[str]:
    sample = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line.strip()][:12]
    first = json.loads(sample[0])
    lines = sample[:6] + [json.dumps(_adp(1)), json.dumps(_no_tools("nt-1")), "", "   ",
                          json.dumps(_adp(2, rid="1"))]
    second = sample[6:] + [json.dumps(_adp(3, rid="1")), json.dumps(_no_tools("nt-2")), "",
                           '{"id": "cut", "messages": [',                                  # not JSON
                           json.dumps({**first, "messages": first["messages"]}),            # its id again
                           json.dumps({"id": "long", "messages": [{"role": "user", "content": "x" * LIMIT}]}),
                           '{"id": "sur", "messages": [{"role": "user", "content": "\\ud800"}]}',
                           json.dumps(_adp(4)), json.dumps(_no_tools("nt-3")), ""]
    return lines + second


def _write(path, lines: list[str]):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _spill_bytes(corpus) -> bytes:
    with open(corpus.records._spill.path, "rb") as f:
        return f.read()


def _load(path, monkeypatch, *, halves_on: bool, **kw):
    loader._recent.clear()
    with monkeypatch.context() as patch:
        if not halves_on:
            patch.setattr(halves.forked, "available", lambda: False)
        return load_corpus([str(path)], max_line_bytes=LIMIT, **kw)


def _as_loaded(corpus) -> tuple:
    return (list(corpus.records), _spill_bytes(corpus), list(corpus.records._spill.offsets), corpus.sha256,
            corpus.skipped_lines, corpus.quirks, corpus.tool_lists, corpus.format)


@pytest.fixture
def cuts(monkeypatch):
    """Every file is cut (SPLIT_BYTES of one byte); the offsets the child was given, as it was given them."""
    made = []
    spooled = forked.Spooled

    def recording(produce, file, convert, max_line_bytes, cut):
        made.append((file.path, cut))
        return spooled(produce, file, convert, max_line_bytes, cut)

    monkeypatch.setattr(halves, "SPLIT_BYTES", 1)
    monkeypatch.setattr(halves.forked, "Spooled", recording)
    return made


@pytest.mark.parametrize("tools", [False, True])
def test_a_file_loaded_in_halves_is_the_corpus_one_pass_loads(tmp_path, cuts, monkeypatch, tools):
    path = _write(tmp_path / "mixed.jsonl", _corpus_lines())
    kw = {"on_error": "skip"}
    if tools:
        schema = {"type": "function", "function": {"name": "lookup", "description": "look a key up",
                                                   "parameters": {"type": "object", "properties": {
                                                       "key": {"type": "string"}}}}}
        (tmp_path / "tools.json").write_text(json.dumps([schema]))
        kw["tools"] = str(tmp_path / "tools.json")
    split_load = _load(path, monkeypatch, halves_on=True, **kw)
    assert len(cuts) == 1 and 0 < cuts[0][1] < os.path.getsize(path)
    one_pass = _load(path, monkeypatch, halves_on=False, **kw)
    assert _as_loaded(split_load) == _as_loaded(one_pass)
    # what the file holds happened in the child's half: the renamed ADP id, the repeat, the bad lines
    ids = [r["id"] for r in split_load.records]
    assert "mixed/1" in ids and any(i.startswith("mixed/1#") for i in ids) and "mixed/4" in ids
    reasons = " | ".join(map(str, split_load.skipped_lines))
    assert "not JSON" in reasons and "duplicate id" in reasons and "longer than max_line_bytes" in reasons
    assert "lone surrogate" in reasons and "empty file" not in reasons
    lines = [s.line for s in split_load.skipped_lines]
    text = path.read_text().splitlines()
    assert all(text[n - 1].strip() for n in lines)   # each named line is the line that holds it
    assert dict(split_load.quirks) and split_load.from_tools_file == one_pass.from_tools_file == (3 if tools else 0)


def test_the_child_spools_a_batch_once_its_records_take_batch_bytes(tmp_path, cuts, monkeypatch):
    """Batches are bounded by their records' bytes as well as by count: long sessions hold memory to
    a batch of lines, whatever their count; the corpus is still one pass's."""
    path = _write(tmp_path / "mixed.jsonl", _corpus_lines())
    one_pass = _as_loaded(_load(path, monkeypatch, halves_on=False, on_error="skip"))
    sizes, items = [], SPOOLED.items

    def counted(self, timeout_s):
        got = items(self, timeout_s)
        return got if got is forked.LOST else (sizes.append(len(item[0])) or item if isinstance(item, tuple) else item
                                               for item in got)

    monkeypatch.setattr(SPOOLED, "items", counted)
    monkeypatch.setattr(halves, "BATCH_BYTES", 1)   # every record its own batch
    assert _as_loaded(_load(path, monkeypatch, halves_on=True, on_error="skip")) == one_pass
    assert len(cuts) == 1 and len(sizes) >= 5   # one batch at BATCH units; a batch a record here
    assert sum(sizes) == sum(1 for line in path.read_text()[cuts[0][1]:].splitlines() if line.strip())


@pytest.mark.parametrize("where", ["first", "second"])
def test_the_first_bad_line_aborts_as_in_one_pass(tmp_path, cuts, monkeypatch, where):
    sample = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line.strip()][:12]
    lines = sample[:6] + [json.dumps(_adp(1)), "", json.dumps(_adp(2, rid="1"))] + sample[6:] + [
        json.dumps(_no_tools("nt-1")), ""]
    bad = '{"id": "broken", "messages": ['
    at = 2 if where == "first" else len(lines) - 2
    lines = lines[:at] + [bad] + lines[at:] + [bad]
    path = _write(tmp_path / "abort.jsonl", lines)
    errors = []
    for on in (True, False):
        with pytest.raises(UserError) as caught:
            _load(path, monkeypatch, halves_on=on)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and f"abort.jsonl:{at + 1}: not JSON" in errors[0]
    assert len(cuts) == 1


@pytest.mark.parametrize("how", ["raises", "exits"])
def test_a_lost_child_leaves_its_half_to_the_host(tmp_path, cuts, monkeypatch, how):
    path = _write(tmp_path / "lost.jsonl", _corpus_lines())
    one_pass = _as_loaded(_load(path, monkeypatch, halves_on=False, on_error="skip"))
    real = halves._second_half

    def lost(*args):
        items = real(*args)
        yield next(items)
        yield next(items)
        if how == "raises":
            raise OSError("the child went away")
        os._exit(3)

    monkeypatch.setattr(halves, "BATCH", 2)
    monkeypatch.setattr(halves, "_second_half", lost)
    assert _as_loaded(_load(path, monkeypatch, halves_on=True, on_error="skip")) == one_pass
    assert len(cuts) == 1


def test_a_large_file_of_blank_lines_is_an_empty_file(tmp_path, cuts, monkeypatch):
    path = tmp_path / "blank.jsonl"
    path.write_text("\n" * 40 + "  \n" * 40)
    for on in (True, False):
        with pytest.raises(UserError, match="blank.jsonl:1: empty file, no records$"):
            _load(path, monkeypatch, halves_on=on)


def test_a_spooled_child_runs_on_while_its_reader_is_busy():
    """The child's items wait in a file, not a pipe: it finishes making more than a pipe holds
    before its parent reads one, and they come back in order."""
    def produce(n: int):
        for i in range(n):
            yield i, bytes([i % 256]) * 100_000   # 20 MB in all, where a pipe holds 64 KiB

    with forked.Spooled(produce, 200) as spooled:
        spooled.worker.process.join(timeout=60)   # the reader is busy elsewhere meanwhile
        assert spooled.worker.process.exitcode == 0
        items = spooled.items(timeout_s=30)
        assert [i for i, _ in items] == list(range(200))
        folder = spooled.folder
    assert not os.path.exists(folder)


def test_a_spooled_child_that_fails_is_lost_and_its_file_goes():
    def produce():
        yield 1
        raise ValueError("no more")

    started = time.monotonic()
    with forked.Spooled(produce) as spooled:
        assert spooled.items(timeout_s=30) is forked.LOST
        assert "no more" in spooled.lost
        folder = spooled.folder
    assert not os.path.exists(folder) and time.monotonic() - started < 30
