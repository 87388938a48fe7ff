"""A large JSONL file's values converted in two halves at once: the second by a forked child.

    for unit, converted in converted_units(file, convert, max_line_bytes, hasher):
        ...   # as `for unit in units(...)` with `convert(unit)` of each readable one

Loading a corpus is parsing, converting, checking and encoding each record: one core's work,
and at 10^6 trajectories minutes of it before the sandbox starts. A JSONL file of SPLIT_BYTES or
more is cut at the line that starts nearest its middle. A forked child (`base.forked`) counts the
lines before the cut, then reads, converts and encodes the second half (`Encoded`: the record's
spill line, id, source and whether its tools were inferred) a batch at a time, each with the
format quirks its conversions counted. Meanwhile this process converts the first
half. The child's batches wait in a scratch file (`forked.Spooled`), so it never waits for this
process. The caller then takes the child's units in file order, so everything that depends on
order stays one pass's: the first bad line, duplicate ids across the halves, an ADP id's
`#ordinal`, the file's hash (fed here, in order, as the second half's batches are read) and the
progress. Should the child be lost, this process reads the second half itself.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from base import forked
from corpora.catalogue import inferred
from corpora.common import QUIRKS, BadRecord
from corpora.reading import (CorpusFile, Unit, empty_file, file_layout, line_units, units)
from corpora.stored import SPLIT_BYTES, spill_line

BATCH = 256            # units the child spools at a time, at most
BATCH_BYTES = 8 << 20  # or fewer, once their records' lines take this much (long sessions: memory stays bounded)
_FIND_NEWLINE = 64     # MiB read past the middle for a line's start before the file is read in one pass

Converted = list   # [(record or BadRecord, format)]: what `convert` makes of one unit


@dataclass(frozen=True)
class Encoded:
    """A record the child converted and checked, as its spill line."""
    line: bytes       # corpora.stored.spill_line of the record
    id: str
    source: str       # str(record.get("source") or "")
    inferred: bool    # corpora.catalogue.inferred: its tools were made from its calls

    @classmethod
    def of(cls, record: dict) -> "Encoded":
        return cls(spill_line(record), record["id"], str(record.get("source") or ""), inferred(record))

    def decoded(self) -> dict:
        """The record (its keys in the order it had)."""
        return json.loads(self.line)


def converted_units(file: CorpusFile, convert: Callable[[Unit], Converted], max_line_bytes: int,
                    hasher) -> Iterator[tuple[Unit, Converted]]:
    """Each unit of `file` in order with `convert(unit)` (nothing for an unreadable one); a large
    JSONL file's second half converted by a forked child (see the module docstring), whose records
    come as `Encoded` and whose units carry no value. Every byte is fed to `hasher`, in order."""
    cut = _cut(file, max_line_bytes)
    if cut is None:
        for unit in units(file, max_line_bytes, hasher):
            yield unit, (convert(unit) if unit.error is None else [])
        return
    size, empty = os.path.getsize(file.path), True
    started = time.monotonic()
    with forked.Spooled(_second_half, file, convert, max_line_bytes, cut) as spooled:
        for unit, _ in line_units(file, max_line_bytes, hasher, stop=cut):
            empty = False
            yield unit, (convert(unit) if unit.error is None else [])
        fed = _Feed(file.path, hasher, cut)
        items = spooled.items(60 + 4 * (time.monotonic() - started))   # the checker's patience with its child
        if items is not forked.LOST:
            next(items)   # the line count before the cut
            for entries, quirks in items:
                fed.to(entries[-1][1] if entries else size)
                if quirks and (counter := QUIRKS.get()) is not None:
                    counter.update(quirks)
                for line, _, error, converted in entries:
                    empty = False
                    yield Unit(file.path, line, None, f"{file.label}:{line}", error=error), [
                        (BadRecord(item) if isinstance(item, str) else item, kind) for item, kind in converted]
            fed.to(size)
    if items is forked.LOST:   # the child was lost: this process reads the second half itself
        for unit, _ in line_units(file, max_line_bytes, hasher, start=cut, lineno=_lines_before(file.path, cut)):
            empty = False
            yield unit, (convert(unit) if unit.error is None else [])
    if empty:
        yield empty_file(file), []


def _cut(file: CorpusFile, max_line_bytes: int) -> int | None:
    """The offset of the line that starts first after the middle of a JSONL file of SPLIT_BYTES
    or more, where a second core and `fork` are there; None: read it in one pass."""
    size = os.path.getsize(file.path)
    if size < SPLIT_BYTES or not forked.available() or file_layout(file.path, max_line_bytes) != "jsonl":
        return None
    with open(file.path, "rb") as f:
        at = size // 2
        f.seek(at)
        for _ in range(_FIND_NEWLINE):
            block = f.read(1 << 20)
            newline = block.find(b"\n")
            if newline >= 0:
                cut = at + newline + 1
                return cut if cut < size else None
            if not block:
                return None
            at += len(block)
    return None


def _lines_before(path: str, cut: int) -> int:
    """The lines (newlines) in the file's first `cut` bytes."""
    lines = 0
    with open(path, "rb") as f:
        while cut > 0:
            block = f.read(min(cut, 1 << 20))
            if not block:
                break
            lines += block.count(b"\n")
            cut -= len(block)
    return lines


class _Feed:
    """Feeds `hasher` the file's bytes from `at` on, in order, as far as it is asked to."""

    def __init__(self, path: str, hasher, at: int):
        self.path, self.hasher, self.at = path, hasher, at

    def to(self, end: int) -> None:
        if end <= self.at:
            return
        with open(self.path, "rb") as f:
            f.seek(self.at)
            while self.at < end:
                block = f.read(min(end - self.at, 1 << 20))
                if not block:
                    break
                self.hasher.update(block)
                self.at += len(block)


def _second_half(file: CorpusFile, convert: Callable[[Unit], Converted], max_line_bytes: int,
                 cut: int) -> Iterator[Any]:
    """In the forked child: the line count before the cut, then batches of (entries, quirks), an
    entry being (line, end offset, error, [(Encoded or the reason it is no record, format)])."""
    lineno = _lines_before(file.path, cut)
    yield lineno
    entries: list = []
    quirks: Counter = Counter()
    QUIRKS.set(quirks)   # the child's own count, sent with its batch
    held = 0
    for unit, end in line_units(file, max_line_bytes, None, start=cut, lineno=lineno):
        converted = [(str(item) if isinstance(item, BadRecord) else Encoded.of(item), kind)
                     for item, kind in (convert(unit) if unit.error is None else [])]
        entries.append((unit.line, end, unit.error, converted))
        held += sum(len(item.line) for item, _ in converted if isinstance(item, Encoded))
        if len(entries) == BATCH or held >= BATCH_BYTES:
            yield entries, dict(quirks)
            entries, held = [], 0
            quirks.clear()
    if entries:
        yield entries, dict(quirks)
