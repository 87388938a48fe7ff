"""`load_corpus`: files in, valid canonical raw records out, every refusal named.

Each JSON value of each file (see `corpora.reading`) becomes one canonical raw record
(DESIGN.md "Formats"), checked with `base.schemas.check_raw`. A bad value is named as
`path:line: reason` (an array element as `path:line [i]: reason`); by default the first one
aborts with a `UserError`, with `on_error="skip"` the bad ones are collected instead, each with
its reason (`Corpus.skipped_lines`).
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
import time
import weakref
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from base.errors import UserError
from base.files import atomic_write
from corpora.adp import convert_adp
from corpora.catalogue import ToolsFile, apply_catalogue, inferred, notice, read_tools_file, with_file_tools
from corpora.common import QUIRKS, BadRecord, json_type
from corpora.halves import Encoded, converted_units
from corpora.openai import (canonical_unchanged, convert_openai, convert_swe_agent,
                                   convert_tau_bench, convert_toolbench)
from corpora.reading import (DEFAULT_MAX_LINE_BYTES, CorpusFile, Unit, corpus_files,
                                    file_sha256, units)
from corpora.sharegpt import convert_sharegpt
from corpora.stored import Spill, StoredRecords, owned_folder, remove
from corpora.tau2 import is_results, simulations
from base.schemas import canonical_json, check_raw

FORMATS = ("canonical", "sharegpt", "adp", "tau-bench", "tau2-bench", "toolbench", "swe-agent")


@dataclass(frozen=True)
class SkippedLine:
    """A value of the corpus that was not loaded, and why."""
    path: str
    line: int
    index: int | None      # its position in a JSON array, else None
    reason: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" + (f" [{self.index}]" if self.index is not None else "")

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"

    def to_json(self) -> dict:
        return {"path": self.path, "line": self.line, "index": self.index, "reason": self.reason}


@dataclass(frozen=True)
class Corpus:
    records: list[dict]        # canonical raw records, file order
    sha256: str                # see `load_corpus`
    paths: tuple[str, ...]     # the files read (a folder given stands for its files)
    format: str                # one of FORMATS, or "mixed"
    skipped_lines: tuple[SkippedLine, ...] = ()   # on_error="skip": what was left out, and why
    holdout: dict | None = None  # {"seed", "share"}: the dev tenth was taken out (corpora.split.train_part)
    inputs: tuple[str, ...] = ()  # the paths as given (a folder stays a folder): what a replay loads again
    tools_file: ToolsFile | None = None   # --tools: the real schemas of records that carry none
    tool_lists: dict | None = None        # per source: the catalogue built from its calls (corpora.catalogue)
    from_tools_file: int = 0              # records that took the --tools schemas
    quirks: tuple[tuple[str, int], ...] = ()   # format quirks normalised on load (common.QUIRKS): (what, how many)

    @property
    def quirks_notice(self) -> str | None:
        """One line for stderr naming what loading normalised (None: nothing)."""
        return "; ".join(f"{n} {what}" for what, n in self.quirks) or None

    @property
    def skipped(self) -> tuple[str, ...]:
        """`path:line: reason` of each skipped value."""
        return tuple(map(str, self.skipped_lines))

    @property
    def tools_notice(self) -> str | None:
        """One line for stderr when tool lists were built or replaced (None: the files had them)."""
        return notice(self.tool_lists or {}, self.tools_file, self.from_tools_file)

    @functools.cached_property
    def staged(self) -> str:
        """A file of the records as the sandbox reads them (canonical JSONL), written once per loaded
        corpus, one record at a time: every candidate curated from it in a run is given it (a hard
        link, read-only in the sandbox: sandbox.curate.give_corpus; the records are not changed after
        loading). Removed with this corpus."""
        folder = owned_folder()
        weakref.finalize(self, remove, folder, os.getpid())
        path = os.path.join(folder, "staged.jsonl")
        if isinstance(self.records, StoredRecords):
            self.records.write_canonical(path)   # a large corpus in two halves at once
            return path
        with open(path, "wb") as out:
            for record in self.records:
                out.write((canonical_json(record) + "\n").encode("utf-8"))
        return path

    @property
    def staged_bytes(self) -> int:
        """The size of `staged`, known before it is written."""
        if isinstance(self.records, StoredRecords):
            return self.records.stored_bytes   # a canonical line is as long as the stored one
        return sum(len((canonical_json(r) + "\n").encode("utf-8")) for r in self.records)

    @property
    def retained_share(self) -> float:
        """Loaded records over all values read (loaded + skipped)."""
        total = len(self.records) + len(self.skipped_lines)
        return len(self.records) / total if total else 0.0


def corpus_jsonl(records: Iterable[Mapping]) -> bytes:
    """Canonical JSONL: one canonical JSON line per record."""
    return "".join(canonical_json(record) + "\n" for record in records).encode("utf-8")


def write_corpus(records: Iterable[Mapping], path) -> None:
    """Write canonical JSONL atomically (one canonical JSON line per record)."""
    atomic_write(path, corpus_jsonl(records))


def detect_format(obj: Mapping) -> str | None:
    """One of FORMATS, or None when the object is none of them."""
    if "messages" in obj:
        return "canonical"
    if "conversations" in obj:
        return "sharegpt"
    if isinstance(obj.get("traj"), list):
        return "tau-bench"
    if is_results(obj):
        return "tau2-bench"
    if isinstance(obj.get("answer_generation"), dict):
        return "toolbench"
    if isinstance(obj.get("history"), list):
        return "swe-agent"
    content = obj.get("content")
    if isinstance(content, list) and (
            "schema_version" in obj or not content
            or any(isinstance(item, dict) and "class_" in item for item in content)):
        return "adp"
    return None


_REQUIRED = {"canonical": "messages", "sharegpt": "conversations", "adp": "content",
             "tau-bench": "traj", "tau2-bench": "simulations", "toolbench": "answer_generation", "swe-agent": "history"}


def convert_record(obj: Any, fmt: str = "auto", default_id: str = "",
                   scope: str = "") -> tuple[dict, str]:
    """One parsed JSON value -> (valid canonical record, its format); raises BadRecord.
    `scope` (the file's stem) qualifies ADP ids, which are unique within a dataset only."""
    if not isinstance(obj, dict):
        raise BadRecord(f"not a JSON object (got {json_type(obj)})")
    kind = detect_format(obj) if fmt == "auto" else fmt
    if kind is None:
        raise BadRecord("unrecognised record: expected 'messages' (OpenAI/canonical), "
                        "'conversations' (ShareGPT), 'traj' (tau-bench), 'simulations' with 'info' (a tau2-bench "
                        "Results file), 'answer_generation' "
                        "(ToolBench), 'history' (SWE-agent .traj) or an ADP 'content' list of "
                        "actions and observations")
    if _REQUIRED[kind] not in obj:
        hint = "; this is a tau2-bench Results file: --format tau2-bench (or auto)" if is_results(obj) else ""
        raise BadRecord(f"{_REQUIRED[kind]}: missing (format {kind}){hint}")
    if kind == "tau2-bench":   # a whole Results document is expanded by `_converted`: this one lacks its `info`
        raise BadRecord("info: missing (a tau2-bench Results file holds `info` with the policy beside `simulations`)")
    if kind == "canonical" and canonical_unchanged(obj) and check_raw(obj) is None:
        return obj, kind                      # already canonical: kept byte for byte
    if kind == "canonical":
        record = convert_openai(obj, default_id)
    elif kind == "sharegpt":
        record = convert_sharegpt(obj, default_id)
    elif kind == "tau-bench":
        record = convert_tau_bench(obj, default_id)
    elif kind == "toolbench":
        record = convert_toolbench(obj, default_id)
    elif kind == "swe-agent":
        record = convert_swe_agent(obj, default_id)
    else:
        record = convert_adp(obj, default_id, scope)
    return checked(record, kind), kind


def checked(record: dict, kind: str) -> dict:
    """`record` when it is a valid canonical record; else BadRecord with the reason and the fix."""
    error = check_raw(record)
    if error:
        fix = "; add its schema to tools or leave the record out" if "not in tools" in error else ""
        origin = "" if kind == "canonical" else f" (in the canonical record converted from {kind})"
        raise BadRecord(f"{error}{origin}{fix}")
    return record


def _converted(unit: Unit, fmt: str, stem: str) -> Iterator[tuple[dict | BadRecord, str]]:
    """(record or the reason it is none, format) for each record one JSON value holds: a tau2-bench
    Results file holds one per simulation (its reasons name `simulations[k]`), any other value one."""
    if is_results(unit.value) and fmt in ("auto", "tau2-bench"):
        try:
            for where, record in simulations(unit.value, unit.default_id):
                try:
                    yield (record if isinstance(record, BadRecord) else checked(record, "tau2-bench")), "tau2-bench"
                except BadRecord as exc:
                    yield BadRecord(f"{where}: {exc}"), "tau2-bench"
        except BadRecord as exc:
            yield exc, "tau2-bench"
        return
    try:
        yield convert_record(unit.value, fmt, unit.default_id, stem)
    except BadRecord as exc:
        yield exc, fmt


def _converted_list(unit: Unit, fmt: str, stem: str) -> list[tuple[dict | BadRecord, str]]:
    return list(_converted(unit, fmt, stem))


def _combined_sha256(digests: list[tuple[str, str]]) -> str:
    if len(digests) == 1:
        return digests[0][1]
    return hashlib.sha256("".join(f"{n}\0{s}\n" for n, s in digests).encode("utf-8")).hexdigest()


def _digest_name(file: CorpusFile) -> str:
    return file.label


def corpus_sha256(paths) -> str:
    """The corpus hash `load_corpus` would record, from the bytes alone (nothing is parsed)."""
    return _combined_sha256([(_digest_name(f), file_sha256(f.path)) for f in corpus_files(paths)])


def _stem(label: str) -> str:
    name = label.rsplit("/", 1)[-1]
    for suffix in (".jsonl", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _refuse_other_files(files: list[CorpusFile], max_line_bytes: int) -> None:
    """A folder's files whose first value is no trajectory of any format (a dataset's config.json,
    a schema): named together in one sentence, before any record is converted (skipping their
    lines one by one would not be the fix). A file given by name is judged value by value."""
    other = []
    for file in files:
        if "/" not in file.label:   # not found in a folder: the user named it
            continue
        first = next(iter(units(file, max_line_bytes, hashlib.sha256())), None)
        if first is not None and first.error is None and (
                not isinstance(first.value, dict) or detect_format(first.value) is None):
            other.append(file.path)
    if other:
        shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
        raise UserError(f"{shown}: not {'trajectory files' if len(other) > 1 else 'a trajectory file'} (the first value holds none of "
                        "'messages', 'conversations', 'traj', 'answer_generation', 'history' or an ADP 'content' "
                        "list); move them out of the folder, or give the trajectory files themselves")


def room_for_records(files: list[CorpusFile]) -> None:
    """UserError, before anything is read, when the records would not fit where they are kept while
    the corpus is used (corpora.stored: the temporary folder; about the size of the files)."""
    size = sum(os.path.getsize(f.path) for f in files)
    folder = tempfile.gettempdir()
    free = shutil.disk_usage(folder).free
    if size > free:
        raise UserError(f"the corpus files take {size / 2**30:.2f} GiB and its records are kept on disk while it is used, "
                        f"but {folder} has {free / 2**30:.2f} GiB free; free space there or set TMPDIR to a larger disk")


SKIP_HINT = "; to leave out every invalid record instead, and count it: --on-bad-line skip (curate, run, eval)"


RECENT = 2   # loaded corpora a process keeps for the same files asked again (a run: launch, dev check, curation, evaluation)
_recent: "OrderedDict[tuple, Corpus]" = OrderedDict()
PROGRESS_EVERY_S = 5.0   # the least time between two of loading's progress lines
_CHECK_EVERY = 1000      # records between two reads of the clock


def load_corpus(paths, fmt: str = "auto", on_error: str = "abort",
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, tools=None,
                on_progress: Callable[[str], None] | None = None) -> Corpus:
    """Load corpus files (or folders of them) into canonical raw records, in file order.

    A process asking again for the same bytes with the same choices gets the same `Corpus` (the
    `RECENT` last loaded; its records are decoded afresh on each access, so no caller sees
    another's changes): the files are hashed, not parsed again — at 10^6 trajectories a load takes
    minutes, and a run asks at launch, for its checks, for its curation and for each evaluation. `on_progress`, when given, is told how far a load is every
    PROGRESS_EVERY_S (nothing for a shorter one).

    Records without tool schemas get their source's catalogue, or with `tools` (a path, or a
    `ToolsFile`) the schemas of that file (corpora.catalogue).

    `sha256` is the sha256 of the file's bytes for one file; for several, the sha256 of the
    lines `f"{name}\\0{file_sha}\\n"` in order, `name` being the basename (a folder's files:
    `folder/relative path`). Ids must be unique across files, except ADP's (see
    `corpora.adp`), which are qualified by their file.
    """
    if fmt == "openai":
        fmt = "canonical"
    if fmt not in ("auto", *FORMATS):
        raise UserError(f"unknown corpus format {fmt!r} (expected auto, openai, {', '.join(FORMATS)})")
    if on_error not in ("abort", "skip"):
        raise UserError(f"unknown on_error {on_error!r} (expected abort or skip)")
    given = [paths] if isinstance(paths, (str, bytes, os.PathLike)) else list(paths)
    choices = (tuple(os.fsdecode(p) for p in given), fmt, on_error, max_line_bytes, _tools_key(tools),
               tempfile.gettempdir())   # where its records are kept
    if any(key[:-1] == choices for key in _recent):   # else nothing to find: the files are read once, by the parse
        key = (*choices, corpus_sha256(given))
        if key in _recent:
            _recent.move_to_end(key)
            return _recent[key]
    corpus = _load(given, fmt, on_error, max_line_bytes, tools, on_progress)
    _recent[(*choices, corpus.sha256)] = corpus   # the bytes it read, should the files have changed meanwhile
    while len(_recent) > RECENT:
        _recent.popitem(last=False)
    return corpus


def _tools_key(tools) -> tuple | None:
    if tools is None:
        return None
    if isinstance(tools, ToolsFile):
        return ("read", tools.path, tools.sha256)
    return ("file", os.fsdecode(tools), file_sha256(tools) if os.path.isfile(tools) else None)


class _Counting:
    """A hasher that also counts the bytes it is fed: how far a load has read."""

    def __init__(self, hasher):
        self.hasher, self.bytes = hasher, 0

    def update(self, data) -> None:
        self.bytes += len(data)
        self.hasher.update(data)

    def hexdigest(self) -> str:
        return self.hasher.hexdigest()


def _load(given: list, fmt: str, on_error: str, max_line_bytes: int, tools,
          on_progress: Callable[[str], None] | None) -> Corpus:
    files = corpus_files(given)
    room_for_records(files)
    if on_error == "abort" and fmt == "auto":
        _refuse_other_files(files, max_line_bytes)
    tools_file = read_tools_file(tools) if tools is not None and not isinstance(tools, ToolsFile) else tools
    from_file = 0
    spill = Spill()   # the records on disk as they are accepted: the host holds where, not what
    skipped: list[SkippedLine] = []
    kinds: set[str] = set()
    first_seen: dict[str, tuple[str, int, int | None]] = {}   # id -> where (path, line, index)
    sources: dict[str, list[int]] = {}   # records whose tools were synthesised, by source
    digests: list[tuple[str, str]] = []

    def bad(unit: Unit, reason: str) -> None:
        skip = SkippedLine(unit.path, unit.line, unit.index, reason)
        if on_error == "abort":
            # an empty file holds no invalid record to leave out: no hint to skip
            raise UserError(str(skip) + ("" if reason == "empty file, no records" else SKIP_HINT))
        skipped.append(skip)

    def take(unit: Unit, record: dict | Encoded, kind: str, ordinal: int) -> None:
        nonlocal from_file
        if isinstance(record, Encoded):   # converted by the forked child (corpora.halves): kept as it came
            if not ((tools_file is not None and record.inferred) or (kind == "adp" and record.id in first_seen)):
                if admitted(unit, record.id, kind):
                    if tools_file is None and record.inferred:
                        sources.setdefault(record.source, []).append(len(spill.offsets) - 1)
                    spill.append_line(record.line)
                return
            record = record.decoded()   # it is changed below
        if tools_file is not None and inferred(record):
            record = with_file_tools(record, tools_file)
            error = check_raw(record)
            if error:
                bad(unit, f"{error} (with the schemas of --tools {tools_file.path}); add it to that file")
                return
            from_file += 1
        if kind == "adp" and record["id"] in first_seen:
            record = {**record, "id": f"{record['id']}#{ordinal}"}
        if admitted(unit, record["id"], kind):
            if tools_file is None and inferred(record):
                sources.setdefault(str(record.get("source") or ""), []).append(len(spill.offsets) - 1)
            spill.append(record)

    def admitted(unit: Unit, rid: str, kind: str) -> bool:
        """Whether the record's id is new (it is then kept as seen here); a repeat is a bad line."""
        seen = first_seen.get(rid)
        if seen is not None:
            where = SkippedLine(*seen, "").where
            at = where.replace(f"{seen[0]}:", "line ", 1) if seen[0] == unit.path else where
            bad(unit, f"duplicate id {rid!r}, first seen at {at}; give each record its own id (or drop the repeat)")
            return False
        first_seen[rid] = (unit.path, unit.line, unit.index)
        kinds.add(kind)
        return True

    quirks: Counter = Counter()
    token = QUIRKS.set(quirks)   # the converters count what they normalise
    total, done, started = sum(os.path.getsize(f.path) for f in files), 0, time.monotonic()
    last = started
    try:
        for file in files:
            hasher = _Counting(hashlib.sha256())
            convert = functools.partial(_converted_list, fmt=fmt, stem=_stem(file.label))
            spill.flush()   # a forked child (corpora.halves) starts with nothing of the spill's buffered
            for ordinal, (unit, converted) in enumerate(converted_units(file, convert, max_line_bytes, hasher)):
                if on_progress is not None and ordinal % _CHECK_EVERY == 0 and \
                        time.monotonic() - last >= PROGRESS_EVERY_S:
                    last = time.monotonic()
                    on_progress(f"loading the corpus: {len(spill.offsets) - 1:,} records, "
                                f"{(done + hasher.bytes) / 2**30:.2f} of {total / 2**30:.2f} GiB read "
                                f"({last - started:.0f} s)")
                if unit.error is not None:
                    bad(unit, unit.error)
                    continue
                for record, kind in converted:
                    if isinstance(record, BadRecord):
                        bad(unit, str(record))
                    else:
                        take(unit, record, kind, ordinal)
            digests.append((_digest_name(file), hasher.hexdigest()))
            done += hasher.bytes
    finally:
        QUIRKS.reset(token)
        spill.close()
    del first_seen
    records = StoredRecords(spill)
    if not records:
        first = f"; first: {skipped[0]}" if skipped else ""
        raise UserError(f"{', '.join(f.path for f in files)}: no valid records ({len(skipped)} "
                        f"lines skipped{first})")
    fmt_name = kinds.pop() if len(kinds) == 1 else "mixed"
    records, tool_lists = apply_catalogue(records, sources)
    return Corpus(records=records, sha256=_combined_sha256(digests),
                  paths=tuple(f.path for f in files), format=fmt_name, skipped_lines=tuple(skipped),
                  inputs=tuple(os.fsdecode(p) for p in given), tools_file=tools_file, tool_lists=tool_lists or None,
                  from_tools_file=from_file, quirks=tuple(sorted(quirks.items())))
