"""Reading corpus files: which files a path names, and the JSON values ("units") each holds.

A corpus path is a regular file or a folder; a folder stands for its `*.json`, `*.jsonl` and
`*.traj` files (searched recursively, hidden ones skipped, in sorted path order). Anything else (a FIFO,
a device, a socket) is refused before it is opened, so nothing blocks or reads without end.

A file is read in one of three layouts, told apart by its first bytes:

- JSONL (the first non-blank line is a whole JSON value): one record per line, read in binary
  with bounded reads, so a line longer than `max_line_bytes` is reported and skipped to its
  newline without ever being held in memory. A unit is named `path:line`.
- a JSON array (the file starts with `[`): one record per element, named `path:line [i]` (the
  line the element starts on, its index).
- JSON documents (a pretty-printed object, or several one after another): one record each,
  named `path:line`.

An array or document file is parsed whole, so it may be at most `max_line_bytes` long.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, replace
from typing import Any, Iterator

from base.errors import UserError

DEFAULT_MAX_LINE_BYTES = 64 * 2**20
_SKIP_CHUNK = 2**20
_SUFFIXES = (".json", ".jsonl", ".traj")   # .traj: SWE-agent's one trajectory per file
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


@dataclass(frozen=True)
class CorpusFile:
    path: str      # as it will be opened and reported
    label: str     # its name in ids and the combined hash: basename, or path within its folder


@dataclass(frozen=True)
class Unit:
    """One JSON value of a file, or the reason it cannot be read."""
    path: str
    line: int                  # where the value starts
    index: int | None          # its position in a JSON array, else None
    default_id: str            # the id a record without one gets
    value: Any = None
    error: str | None = None

    @property
    def where(self) -> str:
        """`path:line`, or `path:line [index]` for an array element."""
        return f"{self.path}:{self.line}" + (f" [{self.index}]" if self.index is not None else "")


def _kind_refusal(path: str) -> str | None:
    """None for a regular file; else the one-sentence refusal (stat only, nothing opened)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"{path}: no such file"
    except OSError as exc:
        return f"{path}: cannot read ({exc.strerror or exc})"
    for test, what in _KINDS:
        if test(mode):
            return (f"{path}: is {what}, not a corpus file; give a regular JSONL or JSON file "
                    "(or a folder of them)")
    return None


def _open(path: str):
    refusal = _kind_refusal(path)
    if refusal is None and os.path.isdir(path):
        refusal = f"{path}: is a directory, not a corpus file"
    if refusal:
        raise UserError(refusal)
    try:
        return open(path, "rb")
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None


def corpus_files(paths) -> list[CorpusFile]:
    """The files the given paths name, in order; a folder expands to its JSON(L) files."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    given = [os.fsdecode(p) for p in paths]
    if not given:
        raise UserError("no corpus file given")
    out: list[CorpusFile] = []
    for path in given:
        refusal = _kind_refusal(path)
        if refusal:
            raise UserError(refusal)
        if not os.path.isdir(path):
            out.append(CorpusFile(path, os.path.basename(path)))
            continue
        found = []
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found += [os.path.join(root, f) for f in files
                      if f.endswith(_SUFFIXES) and not f.startswith(".")]
        if not found:
            raise UserError(f"{path}: is a directory with no .json, .jsonl or .traj files; give a corpus "
                            "file or a folder of them")
        top = os.path.basename(os.path.normpath(path))
        for f in sorted(found, key=lambda p: os.path.relpath(p, path)):
            refusal = _kind_refusal(f)
            if refusal:
                raise UserError(refusal)
            out.append(CorpusFile(f, f"{top}/{os.path.relpath(f, path)}"))
    return out


def iter_lines(path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *,
               hasher=None) -> Iterator[tuple[int, bytes | None, str | None]]:
    """Yield `(lineno, line, None)` for every non-blank line (without its `\\n` / `\\r\\n`), or
    `(lineno, None, reason)` for a line longer than `max_line_bytes`, which is skipped to its
    newline in bounded reads and never held whole. Memory stays O(max_line_bytes).
    `hasher` (a hashlib object), when given, is fed every byte of the file as it is read."""
    for lineno, line, error, _ in lines_from(path, max_line_bytes, hasher=hasher):
        yield lineno, line, error


def lines_from(path, max_line_bytes: int, *, hasher=None, start: int = 0, stop: int | None = None,
               lineno: int = 0) -> Iterator[tuple[int, bytes | None, str | None, int]]:
    """`iter_lines` of the bytes from `start` (the first byte of a line, `lineno` lines before it)
    up to `stop` (the first byte of a line; None: the end), each with the offset just past it."""
    path = os.fspath(path)
    limit = max_line_bytes + 2  # room for "\r\n"
    update = hasher.update if hasher is not None else None
    with _open(path) as f:
        if start:
            f.seek(start)
        at = start
        while stop is None or at < stop:
            chunk = f.readline(limit)
            if not chunk:
                return
            lineno += 1
            at += len(chunk)
            if update:
                update(chunk)
            if chunk.endswith(b"\n") or len(chunk) < limit:
                line = chunk[:-1] if chunk.endswith(b"\n") else chunk
                if line.endswith(b"\r"):
                    line = line[:-1]
                del chunk
                if len(line) > max_line_bytes:
                    yield lineno, None, _too_long(len(line), max_line_bytes), at
                elif line.strip():
                    yield lineno, line, None, at
                continue
            # Too long: skip to the newline without holding the line.
            total = len(chunk)
            del chunk
            while True:
                piece = f.readline(_SKIP_CHUNK)
                if not piece:
                    break
                if update:
                    update(piece)
                at += len(piece)
                total += len(piece)
                if piece.endswith(b"\n"):
                    total -= 1
                    break
            yield lineno, None, _too_long(total, max_line_bytes), at


def _too_long(n: int, limit: int) -> str:
    return (f"line is longer than max_line_bytes, the cap on one record ({n} bytes > {limit}); "
            "split the trajectory into shorter records")


def file_sha256(path) -> str:
    """sha256 hex of a file's bytes, read in bounded chunks."""
    h = hashlib.sha256()
    with _open(os.fspath(path)) as f:
        for block in iter(lambda: f.read(_SKIP_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed in canonical JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:24]} overflows to infinity; write it within ±1.7e308, or as a string")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_SURROGATE_ESCAPE = re.compile(r"\\[uU][dD][89a-fA-F][0-9a-fA-F]{2}")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any) -> str | None:
    """The first string (or key) of `value` holding a lone surrogate, which no UTF-8 file can hold."""
    if isinstance(value, str):
        return value if _LONE_SURROGATE.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        bad = _lone_surrogate(key) if isinstance(key, str) else None
        if bad is None:
            bad = _lone_surrogate(item)
        if bad is not None:
            return bad
    return None


def check_text(value: Any, text: str) -> Any:
    """`value` decoded from `text`, refused when an escape left a lone surrogate (e.g. "\\ud800"):
    a pair of escapes is one character, one alone is not Unicode and cannot be written back."""
    if _SURROGATE_ESCAPE.search(text):
        bad = _lone_surrogate(value)
        if bad is not None:
            code = _LONE_SURROGATE.search(bad).group()
            raise ValueError(f"not Unicode: the escape \\u{ord(code):04x} is a lone surrogate (half of a UTF-16 pair); "
                             "write the character itself or its full pair")
    return value


def decode(data: bytes) -> str:
    """UTF-8 text (a leading BOM dropped); raises ValueError naming the bad byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: invalid byte 0x{data[exc.start]:02x} at byte offset "
                         f"{exc.start} of the line") from None
    return text.removeprefix("\ufeff")


def _reason(exc: json.JSONDecodeError) -> str:
    """The decoder's reason without its own trailing "at" ("Unterminated string starting at"),
    which the caller's "at column N" supplies."""
    return exc.msg.removesuffix(" at")


def parse_line(line: bytes) -> Any:
    """One JSONL line's value; raises ValueError with the reason."""
    text = decode(line)
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {_reason(exc)} at column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    return check_text(value, text)


def file_layout(path: str, max_line_bytes: int) -> str:
    """'jsonl', 'array' or 'documents' (see the module docstring)."""
    with _open(path) as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"["):
        return "array"
    if not head.startswith(b"{"):
        return "jsonl"
    for _, line, error in iter_lines(path, max_line_bytes):
        if error is not None:
            return "jsonl"
        try:
            parse_line(line)
            return "jsonl"
        except ValueError:
            return "documents"
    return "jsonl"


def units(file: CorpusFile, max_line_bytes: int, hasher) -> Iterator[Unit]:
    """The JSON values of one file, in order (see the module docstring). Every byte is fed to
    `hasher`. A file with no value yields one unit with the error 'empty file, no records'."""
    layout = file_layout(file.path, max_line_bytes)
    empty = True
    if layout == "jsonl":
        for unit, _ in line_units(file, max_line_bytes, hasher):
            empty = False
            yield unit
    else:
        for unit in _document_units(file, layout, max_line_bytes, hasher):
            empty = False
            yield unit
    if empty:
        yield empty_file(file)


def empty_file(file: CorpusFile) -> Unit:
    """The one unit of a file that holds no value."""
    return Unit(file.path, 1, None, f"{file.label}:1", error="empty file, no records")


def line_units(file: CorpusFile, max_line_bytes: int, hasher, **span) -> Iterator[tuple[Unit, int]]:
    """The values of a JSONL file, one a line, each with the offset just past its line; `span`:
    `lines_from`'s start, stop and lineno (a part of the file)."""
    for lineno, line, error, end in lines_from(file.path, max_line_bytes, hasher=hasher, **span):
        unit = Unit(file.path, lineno, None, f"{file.label}:{lineno}")
        if error is None:
            try:
                yield replace(unit, value=parse_line(line)), end
                continue
            except ValueError as exc:
                error = str(exc)
        yield replace(unit, error=error), end


def _document_units(file: CorpusFile, layout: str, max_line_bytes: int, hasher) -> Iterator[Unit]:
    def failure(line: int, reason: str, index: int | None = None) -> Unit:
        return Unit(file.path, line, index, file.label, error=reason)

    with _open(file.path) as f:
        data = f.read(max_line_bytes + 1)
        hasher.update(data)
        if len(data) > max_line_bytes:
            for block in iter(lambda: f.read(_SKIP_CHUNK), b""):
                hasher.update(block)
            yield failure(1, f"a JSON {'array' if layout == 'array' else 'document'} file is read "
                             f"whole and this one is larger than max_line_bytes ({max_line_bytes} "
                             "bytes); convert it to JSONL, one record per line (e.g. "
                             "jq -c '.[]' FILE > FILE.jsonl)")
            return
    try:
        text = decode(data)
    except ValueError as exc:
        yield failure(1, str(exc).replace("of the line", "of the file"))
        return
    end = len(text)
    pos, index, line, counted = 0, 0, 1, 0

    def skip(p: int) -> int:
        while p < end and text[p] in " \t\r\n":
            p += 1
        return p

    def line_at(p: int) -> int:
        return text.count("\n", 0, p) + 1

    if layout == "array":
        pos = text.index("[") + 1
    while True:
        pos = skip(pos)
        if layout == "array" and pos < end and text[pos] == "]":
            if skip(pos + 1) < end:
                yield failure(line_at(pos), "not JSON: extra data after the array's closing ']'")
            return
        if pos >= end:
            if layout == "array":
                yield failure(line, "not JSON: the array is not closed (no ']'); the file is cut short")
            return
        line, counted = line + text.count("\n", counted, pos), pos
        if layout == "array":
            unit = Unit(file.path, line, index, f"{file.label}[{index}]")
        else:
            unit = Unit(file.path, line, None, file.label if index == 0 else f"{file.label}:{line}")
        try:
            start = pos
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield replace(unit, error=f"not JSON: {_reason(exc)} at line {exc.lineno} column "
                                      f"{exc.colno}; the rest of the file cannot be read")
            return
        except (ValueError, RecursionError) as exc:
            yield replace(unit, error=f"not JSON: {exc}; the rest of the file cannot be read")
            return
        try:   # a lone surrogate spoils this record only: the next one is read on
            yield replace(unit, value=check_text(value, text[start:pos]))
        except ValueError as exc:
            yield replace(unit, error=str(exc))
        index += 1
        if layout == "array":
            pos = skip(pos)
            if pos < end and text[pos] == ",":
                pos += 1
            elif not (pos < end and text[pos] == "]"):
                yield failure(line_at(pos), "not JSON: expected ',' or ']' after an array element")
                return
