"""A loaded corpus's records, kept on disk and decoded on access: the host's bounded memory.

`load_corpus` writes each record it accepts to a spill file as one JSON line (its keys in the
order the converter made them, so a decoded record equals the dict it wrote, order included) and
keeps only where each line starts. `StoredRecords` reads them back as the list it replaces:
`len`, indexing (negative too), slicing, iteration in file order, `==` with a list or tuple.
`subset(positions)` is a view of some of them (the train part of a split) over the same file.
Each access decodes a fresh dict: a change made to one does not reach the corpus. The host holds
an offset per record (8 bytes), never the records, whatever the corpus's size.

`canonical_lines()` streams the records as the sandbox reads them (one canonical JSON line
each), so staging a corpus holds one record at a time; `write_canonical(path)` writes them, a
large view in two halves at once (the second by a forked child, `base.forked`). The spill file lives in the temporary
folder while any view of it does (`weakref.finalize`); a killed process's spill is a
`curateevo-records-*` file there.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import weakref
from array import array
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Iterable, Iterator

from base import codec, forked
from base.lifetime import claim

SPILL_PREFIX = "curateevo-records-"
SPLIT_BYTES = 8 << 20   # records of at least this many bytes are written canonically in two halves at once
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def spill_line(record: Mapping) -> bytes:
    """The line a spill file holds for `record` (its keys in the order given)."""
    return (_ENCODE(record) + "\n").encode("utf-8")


def owned_folder(folder: str | None = None) -> str:
    """A new `curateevo-records-*` folder, marked as this process's (base.lifetime.claim) and removed
    with `owner` when its holder goes; a killed process's is removed by the next command."""
    made = tempfile.mkdtemp(prefix=SPILL_PREFIX, dir=folder)
    claim(made)
    return made


class Spill:
    """The file the records are written to; removed when the last view of it is gone."""

    def __init__(self, folder: str | None = None):
        self.folder = owned_folder(folder)
        self.path = os.path.join(self.folder, "records.jsonl")
        self._file = open(self.path, "wb")
        self.offsets = array("q", [0])
        weakref.finalize(self, remove, self.folder, os.getpid())

    def append(self, record: Mapping) -> None:
        self.append_line(spill_line(record))

    def append_line(self, line: bytes) -> None:
        """Append a record's `spill_line`, made elsewhere (a forked child: corpora.halves)."""
        self._file.write(line)
        self.offsets.append(self.offsets[-1] + len(line))

    def flush(self) -> None:
        """Write what is buffered (before a fork: a child must not hold, nor ever write, a copy)."""
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def decode(self, n: int) -> dict:
        start, end = self.offsets[n], self.offsets[n + 1]
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return json.loads(os.pread(fd, end - start, start))
        finally:
            os.close(fd)


def remove(folder: str, owner: int | None = None) -> None:
    """Delete a records folder (gone already: nothing to do); with `owner`, only in that process (a
    forked child leaving does not take its parent's files)."""
    if owner is None or os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)


class StoredRecords(Sequence):
    """Records of a spill file, decoded on access (see the module docstring)."""

    def __init__(self, spill: Spill, positions: Sequence[int] | None = None):
        self._spill = spill
        self._positions = range(len(spill.offsets) - 1) if positions is None else positions

    @classmethod
    def write(cls, records: Iterable[Mapping], folder: str | None = None) -> "StoredRecords":
        """Store `records` (an iterable read once) and view them all."""
        spill = Spill(folder)
        try:
            for record in records:
                spill.append(record)
        finally:
            spill.close()
        return cls(spill)

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return StoredRecords(self._spill, self._positions[index])
        return self._spill.decode(self._positions[index])   # IndexError / TypeError as a list's

    def __iter__(self) -> Iterator[dict]:
        for line in self._lines():
            yield json.loads(line)

    def _lines(self) -> Iterator[bytes]:
        offsets = self._spill.offsets
        with open(self._spill.path, "rb") as f:   # one buffered read in file order
            for n in self._positions:
                if f.tell() != offsets[n]:
                    f.seek(offsets[n])
                yield f.read(offsets[n + 1] - offsets[n])

    def subset(self, positions: Iterable[int]) -> "StoredRecords":
        """A view of the records at `positions` (in the order given) over the same file."""
        return StoredRecords(self._spill, array("q", positions))

    def canonical_lines(self) -> Iterator[bytes]:
        """Each record as one canonical JSON line (what the sandbox reads), one at a time."""
        for line in self._lines():
            yield codec.encode(codec.STANDARD.decode(line.decode("utf-8"))) + b"\n"   # canonical_json's bytes

    def write_canonical(self, path: str) -> None:
        """Write `canonical_lines()` to `path`. A view of at least SPLIT_BYTES is written in two
        halves at once where a second core and `fork` are there: a canonical line is as long as the
        stored one, so the second half's place in the file is known before anything is written, and
        a forked child writes it there while this process writes the first. Should the child fail,
        this process writes its half too; should a half come out longer or shorter than stored (the
        file would not be what one pass writes), the whole file is written again in one pass."""
        total = self.stored_bytes
        cut = self._cut(total)
        if cut is None:
            _write_at(self, path, None)
            return
        k, at = cut
        first, second = StoredRecords(self._spill, self._positions[:k]), StoredRecords(self._spill, self._positions[k:])
        with open(path, "wb") as out:
            out.truncate(total)
        started = time.monotonic()
        with forked.Worker(_write_half, second, path, at) as worker:
            wrote = _write_at(first, path, 0)
            done = worker.next(60 + 4 * (time.monotonic() - started))   # the checker's patience with its child
        if done is forked.LOST:
            done = _write_at(second, path, at)
        if (wrote, done) != (at, total - at):
            _write_at(self, path, None)

    def mapped(self, fn: Callable[[dict], Any], chunk: int = 20_000) -> Iterator[Any]:
        """`fn(record)` of each record, in order. From SPLIT_BYTES on, where a second core and
        `fork` are there, a forked child maps the second half while this process maps the first;
        its results (pickled: small beside a record) wait in a scratch file `chunk` at a time
        (`forked.Spooled`: a pipe would hold the child up); should the child be lost, this process
        maps its half too."""
        cut = self._cut(self.stored_bytes)
        if cut is None:
            yield from map(fn, self)
            return
        k = cut[0]
        second = StoredRecords(self._spill, self._positions[k:])
        started = time.monotonic()
        with forked.Spooled(_mapped_chunks, second, fn, chunk) as spooled:
            yield from map(fn, StoredRecords(self._spill, self._positions[:k]))
            chunks = spooled.items(60 + 4 * (time.monotonic() - started))   # the checker's patience with its child
            if chunks is not forked.LOST:
                for results in chunks:
                    yield from results
                return
        yield from map(fn, second)

    def _cut(self, total: int) -> tuple[int, int] | None:
        """Where to cut these records (of `total` bytes) into two halves done at once: from
        SPLIT_BYTES on, where a second core and `fork` are there; None: one pass."""
        return self._middle(total) if total >= SPLIT_BYTES and forked.available() else None

    def _middle(self, total: int) -> tuple[int, int] | None:
        """(k, bytes of the first k records) for the first k whose records take half of `total`
        (None when that leaves a half empty)."""
        offsets, at = self._spill.offsets, 0
        for k, n in enumerate(self._positions):
            if at >= total / 2:
                return (k, at) if k else None
            at += offsets[n + 1] - offsets[n]
        return None

    @property
    def stored_bytes(self) -> int:
        """The bytes these records take in the spill file (their canonical lines take as many)."""
        offsets = self._spill.offsets
        return sum(offsets[n + 1] - offsets[n] for n in self._positions)

    def __eq__(self, other) -> bool:
        if isinstance(other, (StoredRecords, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None   # as a list: unhashable

    def __reduce__(self):   # a worker process reads the same file; it stays while this view lives here
        return _from_file, (self._spill.path, self._spill.offsets, self._positions)

    def __repr__(self) -> str:
        return f"StoredRecords({self._spill.path!r}, {len(self)} records)"


def _write_at(records: StoredRecords, path: str, offset: int | None) -> int:
    """Write the canonical lines of `records` into `path` from `offset` on (None: the whole file,
    written anew); the bytes written."""
    wrote = 0
    with open(path, "wb" if offset is None else "r+b") as out:
        out.seek(offset or 0)
        for line in records.canonical_lines():
            wrote += out.write(line)
    return wrote


def _mapped_chunks(records: StoredRecords, fn: Callable[[dict], Any], chunk: int) -> Iterator[list]:
    """In the forked child: `fn` of each record, sent back `chunk` results at a time."""
    results = []
    for record in records:
        results.append(fn(record))
        if len(results) == chunk:
            yield results
            results = []
    if results:
        yield results


def _write_half(records: StoredRecords, path: str, offset: int) -> Iterator[int]:
    """In the forked child: the second half written at its place, then its size sent back."""
    yield _write_at(records, path, offset)


class ById(Mapping):
    """Stored records by id: the ids and positions are held, each record decoded when read; `items`
    and `values` read the file in corpus order."""

    def __init__(self, records: StoredRecords):
        self._records = records
        self._at = {record["id"]: n for n, record in enumerate(records)}

    def __getitem__(self, rid: str) -> dict:
        return self._records[self._at[rid]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)

    def values(self) -> Iterator[dict]:   # type: ignore[override]
        return iter(self._records)

    def items(self) -> Iterator[tuple[str, dict]]:   # type: ignore[override]
        return ((record["id"], record) for record in self._records)


def by_id(records: Sequence[Mapping]) -> Mapping[str, Mapping]:
    """{id: record} of loaded records: a `ById` over stored ones (bounded), a dict of a list."""
    return ById(records) if isinstance(records, StoredRecords) else {r["id"]: r for r in records}


def in_order(records: Mapping[str, Mapping]) -> Sequence[Mapping]:
    """The records of a `by_id` mapping in corpus order, as a sequence: the stored records
    themselves (each decoded when read, none held), else a list of the dict's."""
    return records._records if isinstance(records, ById) else list(records.values())


class _Borrowed(Spill):
    """A spill file another process wrote and owns (a pickled view): read, never removed."""

    def __init__(self, path: str, offsets: array):
        self.path, self.offsets = path, offsets


def _from_file(path: str, offsets: array, positions) -> StoredRecords:
    return StoredRecords(_Borrowed(path, offsets), positions)
