"""The host-side artifact checker: everything that judges a candidate runs here, not in the sandbox.

It reads the output directory as regular files only and streams each artifact file one record at
a time (sandbox/artifact_records.py: bounded line, JSON, nesting depth, schema and the checks a
schema cannot say, duplicate ids, canonical re-serialisation), writing each canonical line straight
into the destination file and accumulating the profile Σ, Cost_train and C on the way. A strategy
influences its numbers only through the records it emits.
Rows are written by msgspec (base.codec: the bytes canonical_json writes).

A file of at least SPLIT_BYTES is checked in two halves at once, the second by a forked child
on another core (base.forked), and the halves' verdicts, counts, ids and profiles are joined
in file order (`_check_in_two`): the artifacts' bytes, the profile and the reason a candidate is
rejected for are those of one pass, and when the child cannot finish the parent checks its half.

Host memory: the checker holds one record at a time plus, per record, a 16-byte digest of its id
(duplicates) and bounded counters, so with the caps of `OutputCaps` each checking process (the
parent, and the child of a second half) stays under HOST_MEMORY_BUDGET whatever the candidate writes (tests/test_checker_hardening.py measures
its peak RSS at the caps). Whatever a candidate writes ends as `CandidateRejected` with one
sentence of bounded length, never as another exception.
"""
from __future__ import annotations

import errno
import itertools
import json
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Mapping, Sequence

from base.files import HashingWriter, free_blocks, free_file, scratch_writer
from base import forked
from sandbox.artifact_records import (  # noqa: F401  (MAX_REASON_CHARS, reward_error: the checker's names of old)
    CAPS,
    MAX_REASON_CHARS,
    CandidateRejected,
    IdDigests,
    OutputCaps,
    _canonical_line,
    _lines,
    _parse,
    iter_records,
    quoted,
    reward_error,
)
from base.provenance import DROP_KINDS, DROPPED
from base.schemas import ARTIFACT_KINDS, turn_cost  # noqa: F401  (turn_cost: the checker's name of old)
from sandbox.sigma import N_REF, Profile, ProfileCapExceeded, cost_c, outcome_label, token_count  # noqa: F401

EXPECTED = tuple(f"{kind}.jsonl" for kind in ARTIFACT_KINDS)
HOST_MEMORY_BUDGET = 512 * 2**20   # peak RSS of a process checking output at the caps below (well under it: docs/results/curation.md)
FREE_EVERY = 64 * 2**20   # bytes of a scratch file read between two givings back of their disk (`_Range`)
SPLIT_BYTES = 8 * 2**20   # an SFT or RL file this large is checked in two halves at once (None: never)


@dataclass(frozen=True)
class Checked:
    """What `check_output` wrote: {file name: {"sha256", "count"}} and the profile Σ."""

    artifacts: dict
    profile: dict


def _open_regular(path: Path) -> int:
    """Open for reading only if `path` is a regular file: no symlink, fifo, device or directory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CandidateRejected(f"{path.name} is a symbolic link, not a regular file") from None
        if exc.errno == errno.ENOENT:
            raise CandidateRejected(f"{path.name} was not written") from None
        raise CandidateRejected(f"{path.name} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CandidateRejected(f"{path.name} is not a regular file")
    return fd


# --------------------------------------------------------------------------------------------
# the output directory


def _artifact_streams(out_dir: Path, caps: OutputCaps) -> Iterator[tuple[str, str, IO[bytes]]]:
    """(kind, file name, binary stream) of each artifact file, after the directory is judged."""
    try:
        entries = sorted(os.listdir(out_dir))[: caps.max_files + 1]
    except OSError as exc:
        raise CandidateRejected(f"the output directory cannot be listed ({exc.strerror})") from None
    unexpected = [name for name in entries if name not in EXPECTED and name != DROPPED]
    if unexpected:
        raise CandidateRejected(f"unexpected output entry {quoted(repr(unexpected[0]))}: a strategy emits records "
                                f"only ({', '.join(EXPECTED)}, and the toolkit's {DROPPED})")
    total = 0
    for kind, name in zip(ARTIFACT_KINDS, EXPECTED):
        fd = _open_regular(out_dir / name)
        total += os.fstat(fd).st_size
        if total > caps.max_output_bytes:
            os.close(fd)
            raise CandidateRejected(f"output exceeds {caps.max_output_bytes} bytes")
        with os.fdopen(fd, "rb", buffering=1 << 16) as stream:   # records are ~20 KB: fewer, larger reads
            yield kind, name, stream


def output_overflow(folder: Path, max_bytes: int, max_files: int = CAPS.max_files) -> str | None:
    """Why a running candidate's output directory is over its limits (disk blocks of all regular
    files below it, or entries of any kind: empty files exhaust inodes), else None. Symlinks are
    not followed; the scan stops at the first limit passed."""
    total, entries, stack = 0, 0, [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                listing = list(itertools.islice(it, max_files + 1 - entries))
        except OSError:
            continue
        for entry in listing:
            entries += 1
            if entries > max_files:
                return f"output directory holds more than {max_files} files; killed"
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
        if total > max_bytes:
            return f"output directory exceeded {max_bytes} bytes; killed"
    return None


def check_output(out_dir: Path, dest: Path, raw_ids: Sequence[str], n_ref: float = N_REF,
                 caps: OutputCaps = CAPS, inspect: Callable[[str, dict], None] | None = None,
                 encode: Callable[[str, dict], dict] | None = None,
                 raw_outcomes: Mapping[str, str] | None = None, split_bytes: int | None = SPLIT_BYTES,
                 scratch: bool = False, keep: bool = True) -> Checked:
    """Check the candidate's output in `out_dir` record by record, writing the canonical artifact
    files into `dest` as it goes; their hashes and counts and the profile. Memory stays bounded
    (module docstring); any breach of the contract is CandidateRejected. `inspect(kind, record)`
    may reject a valid record too (the leakage guard); `encode(kind, record)` gives the row
    written for it (the file form), canonical JSON either way. `raw_outcomes` (raw id → "success",
    "failure" or "unknown", `outcome_label`) adds the outcome mix of the corpus and of what was
    retained to the profile's `raw`. SFT and RL files of at least `split_bytes` are checked in two
    halves at once (module docstring), with the same result. `scratch`: the candidate's files are
    read once and then thrown away (a curation's job folder), so the disk of what has been checked is
    given back as the check goes (`_Range`, `base.files.free_blocks`) — the checked files take the
    place of the candidate's instead of adding to them; its files keep their names and sizes.
    `keep` False: the SFT, RL and memory files are hashed and counted but not written (a replay
    that compares hashes: `sandbox.replay`), so they take no disk."""
    job = _Job(Profile(raw_ids, n_ref, caps, raw_outcomes), caps, inspect, encode)
    plan = _halves(Path(out_dir), caps, split_bytes)
    if plan is not None:
        checked = _check_in_two(job, plan, Path(dest), scratch, keep)
    else:
        artifacts, counted = {}, [0]
        for kind, name, stream in _artifact_streams(Path(out_dir), caps):
            with HashingWriter(_artifact_path(dest, name, keep)) as out:   # hashed and written beside the checking
                count = job.check(kind, name, stream, counted, out.write)
            artifacts[name] = {"sha256": out.hexdigest(), "count": count}
            if scratch:
                _free_file(stream.fileno())
        checked = Checked(artifacts, job.acc.result())
    if os.path.lexists(Path(out_dir) / DROPPED):
        checked.artifacts[DROPPED] = _check_drops(Path(out_dir), Path(dest), caps)
    return checked


_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}")
MAX_DROPPED_ID = 1024   # characters of a dropped id (record ids are free text, but not essays)


def _check_drops(out_dir: Path, dest: Path, caps: OutputCaps) -> dict:
    """`dropped.jsonl` (lineage only: never trained, never scored): each line {"kind", "id", "op"},
    a kind of DROP_KINDS, an id of at most MAX_DROPPED_ID characters, an operator name, no
    (kind, id) twice, at most `caps.max_records` lines; written canonically into `dest`."""
    fd = _open_regular(out_dir / DROPPED)
    if os.fstat(fd).st_size > caps.max_output_bytes:
        os.close(fd)
        raise CandidateRejected(f"{DROPPED} exceeds {caps.max_output_bytes} bytes")
    ids, count = IdDigests(), 0
    with os.fdopen(fd, "rb", buffering=1 << 16) as stream, HashingWriter(dest / DROPPED) as out:
        for lineno, raw in _lines(DROPPED, stream, caps):
            where = f"{DROPPED}:{lineno}"
            if lineno > caps.max_records:
                raise CandidateRejected(f"{where}: more than {caps.max_records} dropped ids (the cap)")
            try:
                row = _parse(raw, caps)
            except ValueError as exc:
                raise CandidateRejected(f"{where}: {quoted(exc)}") from None
            if not (isinstance(row, dict) and sorted(row) == ["id", "kind", "op"] and row["kind"] in DROP_KINDS
                    and isinstance(row["id"], str) and 0 < len(row["id"]) <= MAX_DROPPED_ID
                    and isinstance(row["op"], str) and _OP_NAME.fullmatch(row["op"])):
                raise CandidateRejected(f"{where}: not a dropped-id line {{\"kind\": one of {', '.join(DROP_KINDS)}, "
                                        f"\"id\": a string, \"op\": an operator name}}")
            first = ids.seen(row["kind"] + "\0" + row["id"], lineno)
            if first is not None:
                raise CandidateRejected(f"{where}: {row['kind']} id {quoted(repr(row['id']))} dropped twice "
                                        f"(first on line {first})")
            try:
                out.write(_canonical_line(row))
            except ValueError as exc:
                raise CandidateRejected(f"{where}: {quoted(exc)}") from None
            count += 1
    return {"sha256": out.hexdigest(), "count": count}


@dataclass
class _Job:
    """What checking a part of an output needs besides the part; `done`: records of the part so far."""
    acc: Profile
    caps: OutputCaps
    inspect: Callable[[str, dict], None] | None
    encode: Callable[[str, dict], dict] | None
    done: int = 0

    def check(self, kind: str, name: str, stream: IO[bytes], counted: list, write: Callable[[bytes], None],
              first_line: int = 1, ids: IdDigests | None = None) -> int:
        """Checks the records of `stream`, writing each canonical line; their count. When it
        raises, the record it judged is on line `first_line + self.done`."""
        self.done = 0
        for record, line in iter_records(name, stream, self.caps, counted, self.encode, first_line, ids):
            if self.inspect is not None:
                self.inspect(kind, record)
            try:
                self.acc.add(kind, record)
            except ProfileCapExceeded as exc:
                raise CandidateRejected(str(exc)) from None
            write(line)
            self.done += 1
        return self.done


# --------------------------------------------------------------------------------------------
# two halves at once


@dataclass(frozen=True)
class _File:
    kind: str
    name: str
    fd: int
    size: int
    split: int | None   # where the second half starts (just past a newline), or None: one part
    first_line: int = 1   # the second half's first line (1-based), counted before the parent gives back
                          # the first half's disk (its bytes then read as zeros)


@dataclass
class _Half:
    """What the child found in a second half: its records (`count`) and lines read (`lines`), its
    first line, the first line of each id, its profile, and the first rejection (line, reason)."""
    first_line: int
    count: int
    lines: int
    ids: dict
    acc: Profile
    error: tuple[int, str] | None


def _halves(out_dir: Path, caps: OutputCaps, split_bytes: int | None) -> list[_File] | None:
    """The three files opened, each with where its second half starts, when any is worth halving
    and nothing is wrong with the directory (else None: the one-pass check, which says what is)."""
    if split_bytes is None or not forked.available():
        return None
    try:
        names = sorted(os.listdir(out_dir))
    except OSError:
        return None
    if names not in (sorted(EXPECTED), sorted((*EXPECTED, DROPPED))):   # the notes are checked after the halves
        return None
    files, total = [], 0
    try:
        for kind, name in zip(ARTIFACT_KINDS, EXPECTED):
            fd = _open_regular(out_dir / name)
            size = os.fstat(fd).st_size
            total += size
            split = None
            if kind != "memory" and size >= split_bytes:   # memory's token cap counts in file order
                window = os.pread(fd, caps.max_record_bytes + 1, size // 2)
                at = window.find(b"\n")
                split = size // 2 + at + 1 if 0 <= at and size // 2 + at + 1 < size else None
            files.append(_File(kind, name, fd, size, split, _newlines_before(fd, split) + 1 if split else 1))
    except CandidateRejected:
        files = []
    if len(files) < len(EXPECTED) or total > caps.max_output_bytes or not any(f.split for f in files):
        for f in files:
            os.close(f.fd)
        return None
    return files


class _Range:
    """The bytes [start, end) of a file as a stream of lines (its own file offset). With `scratch` (the
    file open for writing, `base.files.scratch_writer`), the disk of what has been read is given back
    every FREE_EVERY bytes: a checked copy then does not add to the candidate's file but replaces it."""

    def __init__(self, fd: int, start: int, end: int, scratch: int | None = None):
        self.stream = os.fdopen(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY), "rb", buffering=1 << 16)
        self.stream.seek(start)
        self.left = end - start
        self.scratch, self.read, self.freed = scratch, start, start

    def readline(self, limit: int) -> bytes:
        raw = self.stream.readline(min(limit, self.left)) if self.left > 0 else b""
        self.left -= len(raw)
        self.read += len(raw)
        if self.scratch is not None and self.read - self.freed >= FREE_EVERY:
            whole = self.read - self.read % 4096   # whole blocks: a part of one is zeroed, not given back
            free_blocks(self.scratch, self.freed, whole)
            self.freed = whole
        return raw

    def line_at(self, k: int) -> bytes:
        """The k-th line (0-based) from here on."""
        for _ in range(k):
            self.stream.readline()
        return self.stream.readline()

    def close(self) -> None:
        self.stream.close()


def _newlines_before(fd: int, end: int) -> int:
    count, at = 0, 0
    while at < end:
        block = os.pread(fd, min(1 << 22, end - at), at)
        count += block.count(b"\n")
        at += len(block)
    return count


def _second_halves(files: list[_File], dest: Path, job: _Job) -> Iterator[_Half]:
    """In the child (a fork: `job` is its own copy): each second half checked in file order, its
    lines written to dest/.NAME.half."""
    whole = job.acc
    for f in (f for f in files if f.split):
        job.acc = Profile(whole.known, whole.n_ref, job.caps, whole.raw_outcomes)
        first_line, ids, counted, stream = f.first_line, IdDigests(), [0], _Range(f.fd, f.split, f.size)
        error = None
        with open(dest / f".{f.name}.half", "wb", buffering=1 << 20) as out:
            try:
                job.check(f.kind, f.name, stream, counted, out.write, first_line, ids)
            except CandidateRejected as exc:
                error = (first_line + job.done, str(exc))
        stream.close()
        job.acc.known = set()   # not sent back: only what it found
        yield _Half(first_line, job.done, counted[0], ids.first, job.acc, error)
        if error:
            return


def _artifact_path(dest: Path, name: str, keep: bool) -> str:
    """Where a checked artifact is written: `dest/name`, or nowhere (`os.devnull`) when not kept."""
    return os.fspath(Path(dest) / name) if keep else os.devnull


def _check_in_two(job: _Job, files: list[_File], dest: Path, scratch: bool = False, keep: bool = True) -> Checked:
    """The parent's side of the two halves (module docstring). With `scratch` it gives back the disk
    of the first half as it reads it, of the second once the child's verdict on it is in (the child
    frees nothing: the parent reads its half again when the child is lost), and of the child's
    checked half as it appends it."""
    artifacts, counted = {}, [0]
    try:
        with forked.Worker(_second_halves, files, dest, job) as worker:
            for f in files:
                ids = IdDigests()
                writer = scratch_writer(f.fd) if scratch else None
                try:
                    with HashingWriter(_artifact_path(dest, f.name, keep)) as out:
                        first = _Range(f.fd, 0, f.split or f.size, writer)
                        started = time.monotonic()
                        count = job.check(f.kind, f.name, first, counted, out.write, 1, ids)
                        first.close()
                        if f.split:
                            half = worker.next(timeout_s=60 + 4 * (time.monotonic() - started))
                            if half is forked.LOST:   # the child cannot finish: this process checks the half
                                second = _Range(f.fd, f.split, f.size, writer)
                                count += job.check(f.kind, f.name, second, counted, out.write,
                                                   f.first_line, ids)
                                second.close()
                            else:   # the candidate's file is not read after the join
                                count += _join(job, f, half, ids, counted, dest, out, scratch)
                                if writer is not None:
                                    free_file(writer)
                    artifacts[f.name] = {"sha256": out.hexdigest(), "count": count}
                finally:
                    if writer is not None:
                        free_file(writer)
                        os.close(writer)
    finally:
        for f in files:
            os.close(f.fd)
            (dest / f".{f.name}.half").unlink(missing_ok=True)
    return Checked(artifacts, job.acc.result())


def _free_file(fd: int) -> None:
    """The disk of a checked scratch file given back (`check_output`'s `scratch`), where it can be."""
    writer = scratch_writer(fd)
    if writer is not None:
        free_file(writer)
        os.close(writer)


def _join(job: _Job, f: _File, half: _Half, ids: IdDigests, counted: list, dest: Path, out: HashingWriter,
          scratch: bool = False) -> int:
    """The second half after the first: the earliest rejection in file order (on one line, the
    records cap before an id of the first half again before the half's own reason, as one pass
    finds them), else its count, profile and lines."""
    errors = [(half.error[0], 2, half.error[1])] if half.error else []
    room = job.caps.max_records - counted[0]
    if half.lines > room:   # the cap is passed on the half's line room + 1
        line = half.first_line + room
        errors.append((line, 0, f"{f.name}:{line}: more than {job.caps.max_records} records in all (the cap)"))
    again = min(((line, ids.first[key]) for key, line in half.ids.items() if key in ids.first), default=None)
    if again is not None:
        stream = _Range(f.fd, f.split, f.size)
        rid = json.loads(stream.line_at(again[0] - half.first_line))["id"]
        stream.close()
        errors.append((again[0], 1, f"{f.name}:{again[0]}: duplicate id {quoted(repr(rid))} (first on line {again[1]})"))
    if errors:
        raise CandidateRejected(min(errors)[2])
    counted[0] += half.lines
    try:
        job.acc.merge(half.acc)
    except ProfileCapExceeded as exc:
        raise CandidateRejected(str(exc)) from None
    out.write_file(dest / f".{f.name}.half", scratch)   # hashed and written in the writer's thread
    return half.count
