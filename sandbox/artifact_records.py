"""One artifact file read and checked on the host, record by record (`iter_records`);
sandbox/checker.py drives it over a candidate's output directory.

A line is bounded (`OutputCaps.max_record_bytes`: never read whole into memory), parsed as JSON
(no NaN or Infinity; objects and arrays, call arguments included, nested no deeper than
`max_depth`), checked against its schema (base.schemas) and what a schema cannot say (an RL
record's reward must be computable during GRPO: `reward_error`), its provenance stamp settled,
its id compared with those before it (a 16-byte digest each: `IdDigests`), and serialised to its
canonical line (base.canonical). The first record that breaks the contract ends the file as
`CandidateRejected`: one sentence naming file:line and quoting at most MAX_REASON_CHARS of what
the candidate wrote.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
from dataclasses import dataclass
from typing import IO, Callable, Iterator, Mapping

from base import codec
from base.canonical import FieldReader, record_bytes, shared
from base.provenance import settle
from base.schemas import CHECKS
from sandbox.text import printable


@dataclass(frozen=True)
class OutputCaps:
    """What the host reads of a candidate's output at most; past a cap the candidate is rejected.

    Together they bound the checking process's memory (sandbox.checker's HOST_MEMORY_BUDGET)
    independently of the output: one record of `max_record_bytes` parsed at a time (`max_depth`
    bounds its nesting, and so every recursive reader downstream), a digest per id
    (`max_records`), and counters of at most `max_tool_names` names.
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


def quoted(text: object) -> str:
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
    through the decoder, which gives the verdict. Floats are base.codec's ParsedFloat."""
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


def _lines(name: str, stream: IO[bytes], caps: OutputCaps, first: int = 1) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line, none longer than the cap (never read whole into memory)."""
    for lineno in itertools.count(first):
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


class IdDigests:
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
                 encode: Callable[[str, dict], dict] | None = None, first_line: int = 1,
                 ids: "IdDigests | None" = None) -> Iterator[tuple[dict, bytes]]:
    """Each valid record of one artifact file with its canonical line (of `encode(kind, record)`
    when given: one serialisation per record); CandidateRejected at the first that is not
    (file:line, the reason). `counted` ([records so far]) spans files. Records whose tool lists
    are written alike share one list object (base.canonical): a caller must not change it.
    A part of a file starts at line `first_line`, its ids kept in `ids` (the caller's to join)."""
    kind = name.removesuffix(".jsonl")
    check, reader = CHECKS[kind], FieldReader(codec.STANDARD)
    ids = ids if ids is not None else IdDigests()
    counted = counted if counted is not None else [0]
    for lineno, raw in _lines(name, stream, caps, first_line):
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
            if error is None:   # the stamp checked, stored as steps (base/provenance.py)
                texts: dict = {}   # the messages encoded for the digest are spliced into the line
                settle(record, functools.partial(record_bytes, texts=texts))
            line = _canonical_line(record if encode is None else encode(kind, record), texts) if error is None else b""
        except (ValueError, RecursionError, TypeError, KeyError, AttributeError) as exc:
            error = str(exc) if isinstance(exc, ValueError) else f"malformed record ({type(exc).__name__})"
        if error:
            raise CandidateRejected(f"{where}: {quoted(error)}")
        first = ids.seen(record["id"], lineno)
        if first is not None:
            raise CandidateRejected(f"{where}: duplicate id {quoted(repr(record['id']))} (first on line {first})")
        yield record, line


# --------------------------------------------------------------------------------------------
# what GRPO will need of an RL record


def reward_error(record: Mapping) -> str | None:
    """None when trainer.rewards can score `record`, else why it would fail during GRPO: a
    `state_match` environment must be an object, and one its environment rebuilds must name a task
    it knows (`base.environment`: reward_error)."""
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
    from base import registry

    environment = registry.by_tag(env.get("benchmark"))
    return None if environment is None else environment.reward_error(env)
