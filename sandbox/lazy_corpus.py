"""The raw corpus as the strategy receives it: a read-only sequence decoded on access.

`LazyCorpus(path)` indexes the canonical JSONL the host staged (one offset per line, 8 bytes a
record) and decodes a record only when it is asked for, so the runtime holds the records a
strategy keeps, never the whole corpus as Python objects. It behaves as the tuple of parsed
dicts it replaces: `len`, indexing (negative too), slicing (a lazy view), iteration, `in`,
`index`, `count`, `reversed`, `==` with a tuple or another view, `+` (a tuple, as a tuple's `+`
would make) and `random.sample`. Each access decodes a fresh dict: a record changed by a
strategy is its own copy, and the corpus stays as the host staged it. `subset(positions)` is a
view of some of its records: what the toolkit's filters and deduplication return for it, so a
strategy that filters the corpus holds 8 bytes a kept record, not the records. Every record
decoded is counted in `sandbox.progress.DECODED` (the runtime's progress lines).
"""
from __future__ import annotations

import copy
import json
import os
from array import array
from collections.abc import Sequence
from typing import Iterator

from sandbox.progress import DECODED

_CHUNK = 1 << 20   # bytes read at a time while indexing
_DECODER = json.JSONDecoder()


def _parse(line: bytes) -> dict:
    """json.loads(line) for a staged line (canonical: UTF-8 text, an object), without its look for
    another encoding."""
    if line[:1] == b"{":
        return _DECODER.decode(line.decode("utf-8", "surrogatepass"))
    return json.loads(line)


def line_offsets(path) -> array:
    """Start offset of every line of `path`, and its size last: record n is bytes [o[n], o[n+1])."""
    offsets = array("q", [0])
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            at = chunk.find(b"\n")
            while at != -1:
                offsets.append(size + at + 1)
                at = chunk.find(b"\n", at + 1)
            size += len(chunk)
    if offsets[-1] != size:   # a last line without its newline is a record too
        offsets.append(size)
    return offsets


class LazyCorpus(Sequence):
    """Records of a canonical JSONL file, decoded on access (see the module docstring)."""

    def __init__(self, path, _offsets: array | None = None, _positions: range | array | None = None):
        self.path = os.fspath(path)
        self._offsets = line_offsets(self.path) if _offsets is None else _offsets
        self._positions = range(len(self._offsets) - 1) if _positions is None else _positions

    def __len__(self) -> int:
        return len(self._positions)

    def _decode(self, line: int, fd: int | None = None) -> dict:
        if fd is None:   # one record: a descriptor of its own
            with open(self.path, "rb") as f:
                return self._decode(line, f.fileno())
        start, end = self._offsets[line], self._offsets[line + 1]
        DECODED.add()
        return _parse(os.pread(fd, end - start, start))

    def subset(self, positions) -> "LazyCorpus":
        """A view of the records at `positions` of this sequence (in the order given)."""
        return LazyCorpus(self.path, self._offsets, array("q", (self._positions[n] for n in positions)))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return LazyCorpus(self.path, self._offsets, self._positions[index])
        return self._decode(self._positions[index])   # IndexError / TypeError as a tuple's

    def __iter__(self) -> Iterator[dict]:
        positions = self._positions
        if not isinstance(positions, range) or positions.step != 1:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                yield from (self._decode(n, fd) for n in positions)
            finally:
                os.close(fd)
            return
        with open(self.path, "rb") as f:   # contiguous: one buffered read, no seek per record
            if len(positions):
                f.seek(self._offsets[positions.start])
            for _ in positions:
                DECODED.add()
                yield _parse(f.readline())

    def __eq__(self, other) -> bool:
        if isinstance(other, (LazyCorpus, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None   # as a tuple of dicts: unhashable

    def __add__(self, other):
        if isinstance(other, (LazyCorpus, tuple)):
            return tuple(self) + tuple(other)
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, tuple):
            return other + tuple(self)
        return NotImplemented

    def __deepcopy__(self, memo) -> tuple:
        return tuple(copy.deepcopy(record, memo) for record in self)

    def __reduce__(self):   # pickles as where it reads from, not as its records
        return LazyCorpus, (self.path, self._offsets, self._positions)

    def __repr__(self) -> str:
        return f"LazyCorpus({self.path!r}, {len(self)} records)"
