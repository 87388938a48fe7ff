"""Provenance stamps: which operator made or changed a record, with which parameters, and how.

Every toolkit operator that makes or changes a record stamps it: `meta.provenance` becomes
`{"steps": [...], "sha": DIGEST}`, one step per operator in order (`{"op", "how", "params"}`,
`how` one of HOWS), and DIGEST a hash of the whole record as the last operator left it (the
steps included). The raw ids stay in `meta.origin`. The host (base/provenance.py) checks the
digest against the record the strategy wrote: a record changed after its last stamp, or never
stamped, ends with a `custom` step, so a strategy cannot alter a record, or claim another
operator made it, without it showing. A step is only what the toolkit saw: a filter that drops
records stamps nothing; `dropped` notes what an operator removed instead (the runtime writes the
notes to `dropped.jsonl`, and lineage names a removed record by the operator that dropped it)."""
from __future__ import annotations

from typing import Mapping

from base.provenance import CUSTOM, DROP_KINDS, HOWS, KEY, digest, steps_of

__all__ = ["CUSTOM", "DROP_KINDS", "HOWS", "KEY", "Traced", "carry", "digest", "dropped", "drops", "stamp", "step",
           "steps_of", "traced"]

_DROPPED: dict[tuple[str, str], str] = {}   # (kind, id) → the first operator that dropped it, this curation


class Traced(list):
    """A list (messages, weights) that remembers the operator step that made it, so the record
    built from it (`sft_record`) names that operator; it serialises as a plain list."""

    step: dict | None = None


def traced(values, op: str, how: str, **params) -> Traced:
    out = Traced(values)
    out.step = step(op, how, **params)
    return out


def carry(values, like) -> list:
    """`values` remembering the step `like` remembers (a list derived from a traced one)."""
    made = getattr(like, "step", None)
    if made is None:
        return values
    out = Traced(values)
    out.step = made
    return out


def step(op: str, how: str, **params) -> dict:
    if how not in HOWS:
        raise ValueError(f"unknown provenance kind {how!r} (one of {', '.join(HOWS)})")
    made = {"op": op, "how": how}
    if params:
        made["params"] = {k: params[k] for k in sorted(params)}
    return made


def stamp(record: dict, *made: dict, replace: bool = False, parent: Mapping | None = None) -> dict:
    """Stamp `record` (in place, returned): the steps of `parent` (the record it was made from,
    checked: a `custom` step when it was changed after its stamp), or the record's own, then
    `made`; `replace` drops the record's own last step first (an operator that built the record
    with another toolkit function names itself instead)."""
    meta = record.setdefault("meta", {})
    source = record if parent is None else parent
    before = steps_of(source) if isinstance((source.get("meta") or {}).get(KEY), Mapping) else []
    if replace and parent is None and before and before[-1] != CUSTOM:
        before.pop()
    meta[KEY] = {"steps": before + [dict(s) for s in made]}
    meta[KEY]["sha"] = digest(record)
    return record


def dropped(op: str, before, after, kind: str = "raw") -> list:
    """`after` (a list), noting that operator `op` dropped the items of `before` whose id is not in
    it: raw trajectories (`kind` "raw") or records of a kind. The first operator to drop an id keeps it."""
    if kind not in DROP_KINDS:
        raise ValueError(f"unknown dropped kind {kind!r} (one of {', '.join(DROP_KINDS)})")
    after = list(after)
    kept = {item["id"] for item in after}
    for item in before:
        if item["id"] not in kept:
            _DROPPED.setdefault((kind, item["id"]), op)
    return after


def drops(clear: bool = False) -> list[dict]:
    """The drops noted so far, in the order they were noted: [{"kind", "id", "op"}]; `clear`
    forgets them (the runtime clears before a curation)."""
    rows = [{"kind": kind, "id": rid, "op": op} for (kind, rid), op in _DROPPED.items()]
    if clear:
        _DROPPED.clear()
    return rows
