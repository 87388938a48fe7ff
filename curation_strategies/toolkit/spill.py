"""Record lists that keep their older records on disk: what `Curated` holds, so a strategy that
appends a record per trajectory holds a bounded number of them in memory however large the corpus.

A `RecordList` behaves as a list of records: append, extend, `+=`, len, indexing (negative too),
slicing (a list), iteration, `in`, `index`, `count`, `==`, assignment and deletion by index,
insert, pop, sort, reverse, clear. It keeps its newest records as the objects appended (at least
the last `keep`, fewer when records are large) and writes older ones as JSON lines to an unnamed
temporary file, gone when the process ends; a record read back from there is a fresh dict. So:
change a record before appending it, or put a changed one in its place (`out.sft[i] = changed`);
an in-place change to a record read back from disk changes only that copy. A record JSON cannot
encode fails when it reaches disk, as it would fail when the runtime writes it. A list with no
more than `2 * keep` records never touches the disk.

The lines are the runtime's own encoding (`encode_record`), so `encoded_lines` hands the runtime
the bytes it would have written, and a list that spilled writes the same file as a plain list."""
from __future__ import annotations

import json
import os
import tempfile
from array import array
from collections.abc import MutableSequence
from typing import Any, Callable, Iterable, Iterator

KEEP = 512               # records always held as objects (the newest), unless they are large
KEEP_BYTES = 32 * 2**20   # … and no more of them than this much JSON (by the mean size written so far)
_READ = 1 << 20          # bytes read at a time when iterating over what is on disk
SPILL_DIR: str | None = None   # where the unnamed files go: the runtime sets the curation's output folder
                               # (the sandbox's /tmp is a small tmpfs); None: the system's temporary folder


def encode_record(record: Any) -> bytes:
    """One output line: the record as the runtime writes it (UTF-8 JSON, no NaN, a newline)."""
    return json.dumps(record, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n"


class RecordList(MutableSequence):
    """A list of records whose older ones live on disk (see the module docstring)."""

    def __init__(self, records: Iterable[Any] = (), keep: int = KEEP):
        self._keep_max = keep
        self._keep = keep
        self._file = None
        self._offsets = array("q", [0])   # start of each record on disk, and the end last
        self._overrides: dict[int, Any] = {}   # records put in place of ones on disk
        self._tail: list = []
        self.extend(records)

    # -- where a record is ------------------------------------------------------------------------
    @property
    def spilled(self) -> int:
        """How many records are on disk."""
        return len(self._offsets) - 1

    def __len__(self) -> int:
        return self.spilled + len(self._tail)

    def _index(self, index: int) -> int:
        n = len(self)
        index = index.__index__()
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("RecordList index out of range")
        return index

    def _line(self, n: int) -> bytes:
        start, end = self._offsets[n], self._offsets[n + 1]
        return os.pread(self._file.fileno(), end - start, start)

    def _get(self, n: int) -> Any:
        if n >= self.spilled:
            return self._tail[n - self.spilled]
        if n in self._overrides:
            return self._overrides[n]
        return json.loads(self._line(n))

    # -- reading -----------------------------------------------------------------------------------
    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._get(n) for n in range(*index.indices(len(self)))]
        return self._get(self._index(index))

    def _disk_lines(self, start: int, stop: int) -> Iterator[tuple[int, bytes]]:
        """(position, line) of the records on disk from `start` to `stop`, read a megabyte at a time."""
        n = start
        while n < stop:
            last = n + 1
            while last < stop and self._offsets[last + 1] - self._offsets[n] <= _READ:
                last += 1
            block = os.pread(self._file.fileno(), self._offsets[last] - self._offsets[n], self._offsets[n])
            base = self._offsets[n]
            for k in range(n, last):
                yield k, block[self._offsets[k] - base:self._offsets[k + 1] - base]
            n = last

    def __iter__(self) -> Iterator[Any]:
        n = 0
        while n < self.spilled:
            for k, line in self._disk_lines(n, self.spilled):
                yield self._overrides[k] if k in self._overrides else json.loads(line)
                n = k + 1
        while n < len(self):   # the tail, as a list iterates: appends made while iterating are seen
            yield self._get(n)
            n += 1

    def encoded_lines(self, release: Callable[[int, int, int], Any] | None = None) -> Iterator[bytes]:
        """Each record as the runtime writes it (`encode_record`); those on disk as they are there.
        `release(fd, start, end)`, when given, is told each stretch of the disk file once its lines
        have been handed out (the runtime gives their disk back: the list is not read again)."""
        if self.spilled:
            done = 0   # released up to here: whole blocks of 4 KiB (a part of one is zeroed, not freed)
            for k, line in self._disk_lines(0, self.spilled):
                yield encode_record(self._overrides[k]) if k in self._overrides else line
                if release is not None and self._offsets[k + 1] - done >= _READ:
                    release(self._file.fileno(), done, self._offsets[k + 1] // 4096 * 4096)
                    done = self._offsets[k + 1] // 4096 * 4096
            if release is not None:
                release(self._file.fileno(), done, -(-self._offsets[-1] // 4096) * 4096)
        for record in self._tail:
            yield encode_record(record)

    def __eq__(self, other) -> bool:
        if isinstance(other, (RecordList, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None   # as a list

    def __add__(self, other) -> list:
        return [*self, *other]

    def __repr__(self) -> str:
        return f"RecordList({len(self)} records, {self.spilled} on disk)"

    # -- writing -----------------------------------------------------------------------------------
    def append(self, record: Any) -> None:
        self._tail.append(record)
        self._spill_if_full()

    def extend(self, records: Iterable[Any]) -> None:
        if records is self:
            records = list(records)
        for record in records:
            self.append(record)

    def _spill_if_full(self) -> None:
        if len(self._tail) >= 2 * self._keep:
            self._spill(len(self._tail) - self._keep)

    def _spill(self, count: int) -> None:
        """The oldest `count` records of the tail to disk; `keep` follows the mean size written."""
        if self._file is None:
            self._file = tempfile.TemporaryFile(dir=SPILL_DIR)
        lines = [encode_record(record) for record in self._tail[:count]]
        self._file.seek(0, os.SEEK_END)
        self._file.write(b"".join(lines))
        self._file.flush()
        for line in lines:
            self._offsets.append(self._offsets[-1] + len(line))
        del self._tail[:count]
        mean = self._offsets[-1] / self.spilled
        self._keep = max(1, min(self._keep_max, int(KEEP_BYTES // max(mean, 1))))

    def __setitem__(self, index, value) -> None:
        if isinstance(index, slice):
            items = self[:]   # a slice assignment rebuilds the list (whole: as rare as it is general)
            items[index] = value
            self._rebuild(items)
            return
        n = self._index(index)
        if n >= self.spilled:
            self._tail[n - self.spilled] = value
        else:
            self._overrides[n] = value

    def __delitem__(self, index) -> None:
        if isinstance(index, slice):
            gone = set(range(*index.indices(len(self))))
        else:
            gone = {self._index(index)}
        if all(n >= self.spilled for n in gone):
            for n in sorted(gone, reverse=True):
                del self._tail[n - self.spilled]
        elif gone == {len(self) - 1}:   # the last record, on disk: cut the file back (pop in a loop stays linear)
            self._overrides.pop(self.spilled - 1, None)
            self._offsets.pop()
            self._file.truncate(self._offsets[-1])
        else:
            self._rebuild(record for n, record in enumerate(self) if n not in gone)

    def insert(self, index: int, value: Any) -> None:
        n = len(self)
        index = max(0, min(n, index + n if index < 0 else index))
        if index >= self.spilled:
            self._tail.insert(index - self.spilled, value)
            self._spill_if_full()
        else:
            self._rebuild(self._with(index, value))

    def _with(self, index: int, value: Any) -> Iterator[Any]:
        for n, record in enumerate(self):
            if n == index:
                yield value
            yield record

    def sort(self, *, key=None, reverse: bool = False) -> None:
        if not self.spilled:
            self._tail.sort(key=key, reverse=reverse)
            return
        keys = [key(record) if key else record for record in self]
        order = sorted(range(len(keys)), key=keys.__getitem__, reverse=reverse)   # stable, as list.sort
        self._rebuild(self._get(n) for n in order)

    def reverse(self) -> None:
        if not self.spilled:
            self._tail.reverse()
            return
        self._rebuild(self._get(n) for n in reversed(range(len(self))))

    def clear(self) -> None:
        self._reset()

    def _reset(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file, self._offsets, self._overrides, self._tail = None, array("q", [0]), {}, []
        self._keep = self._keep_max

    def _rebuild(self, records: Iterable[Any]) -> None:
        """This list made again from `records` (which may read from it): into a new list first."""
        fresh = RecordList(records, keep=self._keep_max)
        self._reset()
        self._file, self._offsets, self._overrides, self._tail, self._keep = \
            fresh._file, fresh._offsets, fresh._overrides, fresh._tail, fresh._keep
        fresh._file = None

    def copy(self) -> "RecordList":
        return RecordList(self, keep=self._keep_max)

    def __copy__(self) -> "RecordList":
        return self.copy()

    def __deepcopy__(self, memo) -> "RecordList":
        import copy
        return RecordList((copy.deepcopy(r, memo) for r in self), keep=self._keep_max)
