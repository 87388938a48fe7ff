"""Duplicate removal. Exact: a content hash of task + messages. Near: MinHash + LSH over the task
instruction plus the tool-call sequence, never the whole trajectory (that over-merges templated
tasks such as the same request for different cities). The first of each cluster, in corpus
order, is kept."""
from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, Mapping, Sequence

from .calls import call_sequence
from .trajectory import canonical_json, kept_at, task_text

_WORD = re.compile(r"[a-z0-9]+")
MINHASH_SCHEME = "affine32"


def content_hash(raw: Mapping) -> str:
    """sha256 of the task and the messages, with call ids renumbered by position so that copies
    differing only in generated call ids hash alike."""
    renumber: dict[str, str] = {}
    messages = []
    for m in raw["messages"]:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [dict(c, id=renumber.setdefault(c["id"], f"c{len(renumber)}"))
                               for c in m["tool_calls"]]
        if m.get("tool_call_id"):
            m["tool_call_id"] = renumber.get(m["tool_call_id"], m["tool_call_id"])
        messages.append(m)
    return hashlib.sha256(canonical_json({"task": raw.get("task"), "messages": messages}).encode()).hexdigest()


def exact_duplicates(raws: Sequence[Mapping]) -> dict[str, str]:
    """id of each exact duplicate -> id of the first record with the same content hash."""
    first: dict[str, str] = {}
    dupes: dict[str, str] = {}
    for raw in raws:
        key = content_hash(raw)
        if key in first:
            dupes[raw["id"]] = first[key]
        else:
            first[key] = raw["id"]
    return dupes


_LAST_EXACT: list = []   # [(a sequence read on access, its exact_dedup)]: the last one asked about


def exact_dedup(raws: Sequence[Mapping]) -> Sequence[Mapping]:
    """The records without their exact duplicates, in corpus order. For the corpus read on access
    (or a view of it: it has `subset`; its file is read-only) the answer is remembered, for a
    strategy that asks again (AgentRefine: for its training data, then for its memory)."""
    read_on_access = callable(getattr(raws, "subset", None))
    if read_on_access and _LAST_EXACT and _LAST_EXACT[0][0] is raws:
        return _LAST_EXACT[0][1]
    kept = _exact_dedup(raws)
    if read_on_access:
        _LAST_EXACT[:] = [(raws, kept)]
    return kept


def _exact_dedup(raws: Sequence[Mapping]) -> Sequence[Mapping]:
    hashes: set[str] = set()
    ids, dupes = [], set()
    for raw in raws:   # exact_duplicates' ids in one pass, holding hashes and ids, not records
        key = content_hash(raw)
        if key in hashes:
            dupes.add(raw["id"])
        hashes.add(key)
        ids.append(raw["id"])
    return kept_at(raws, [n for n, rid in enumerate(ids) if rid not in dupes])


def task_shingles(text: str) -> set[str]:
    """Lower-cased word unigrams and bigrams of an instruction."""
    words = _WORD.findall(text.lower())
    return {f"t:{w}" for w in words} | {f"t:{a} {b}" for a, b in zip(words, words[1:])}


def call_shingles(raw: Mapping) -> set[str]:
    """Each call signature (name + arguments) and each consecutive pair, so order counts."""
    seq = call_sequence(raw)
    return {f"c:{s}" for s in seq} | {f"cc:{a}>{b}" for a, b in zip(seq, seq[1:])}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def near_duplicates(raws: Sequence[Mapping], threshold: float = 0.7, num_perm: int = 128,
                    seed: int = 1, prefer: Callable[[Mapping], Any] | None = None) -> dict[str, str]:
    """id of each near duplicate -> id of the kept record it duplicates.

    LSH over MinHash signatures of task + call shingles proposes candidates; a candidate is a
    duplicate only if the exact Jaccard of those shingles is >= threshold and the Jaccard of the
    call shingles alone is too, so a templated task with different calls never merges. Records are
    visited in corpus order, or by (prefer(raw), corpus order) when `prefer` is given, and the
    first visited of each cluster is kept."""
    return _near(raws, threshold, num_perm, seed, prefer)[0]


def _near(raws, threshold, num_perm, seed, prefer) -> tuple[dict[str, str], list[str]]:
    """near_duplicates' answer and the id at each position (read in the same pass)."""
    from datasketch import MinHash, MinHashLSH  # on first use: it imports scipy (slow, once per candidate)

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)   # keyed by position: the kept records
    dupes: dict[str, str] = {}
    ids: list[str] = [""] * len(raws)
    # the preference read in one pass in corpus order, then the records in that order from one view
    order = [n for _, n in sorted((prefer(raw), n) for n, raw in enumerate(raws))] if prefer else range(len(raws))
    # The scheme is pinned so signatures do not change with datasketch's default; the
    # permutations are drawn once from the seed and shared by every signature.
    permutations = MinHash(num_perm=num_perm, seed=seed, scheme=MINHASH_SCHEME).permutations
    recent: dict[int, tuple[str, set[str], set[str]]] = {}   # a kept record's id and shingles, read again when needed

    def shingles_of(pos: int, raw: Mapping | None = None) -> tuple[str, set[str], set[str]]:
        if pos not in recent:
            raw = raws[pos] if raw is None else raw
            calls = call_shingles(raw)
            if len(recent) >= 4096:
                recent.clear()
            recent[pos] = (raw["id"], task_shingles(task_text(raw)) | calls, calls)
        return recent[pos]

    for pos, raw in zip(order, kept_at(raws, order) if prefer else raws):
        rid, shingles, calls = shingles_of(pos, raw)
        ids[pos] = rid
        sig = MinHash(num_perm=num_perm, seed=seed, permutations=permutations, scheme=MINHASH_SCHEME)
        sig.update_batch([s.encode("utf-8") for s in sorted(shingles)])
        matches = []
        for k_pos in lsh.query(sig):
            k_id, k_shingles, k_calls = shingles_of(k_pos)
            if _jaccard(shingles, k_shingles) >= threshold and _jaccard(calls, k_calls) >= threshold:
                matches.append((k_pos, k_id))
        if matches:
            dupes[rid] = min(matches)[1]  # the first kept record in corpus order, whatever LSH's order
        else:
            lsh.insert(pos, sig)
    return dupes, ids


def near_dedup(raws: Sequence[Mapping], threshold: float = 0.7, num_perm: int = 128,
               seed: int = 1, prefer: Callable[[Mapping], Any] | None = None) -> Sequence[Mapping]:
    """The records without their near duplicates, in corpus order (see near_duplicates)."""
    dupes, ids = _near(raws, threshold, num_perm, seed, prefer)
    return kept_at(raws, [n for n, rid in enumerate(ids) if rid not in dupes])
