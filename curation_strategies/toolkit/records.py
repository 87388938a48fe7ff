"""Record builders: the SFT record of DESIGN.md and the `Curated` result a strategy returns.
Builders copy what they take, so records never alias the read-only corpus (records built from
one trajectory share one copy of its `tools`)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from .provenance import stamp, step
from .spill import RecordList
from .trajectory import assistant_indices, copy_json, copy_messages, copy_tools, env_of


@dataclass
class Curated:
    """What `curate` returns: SFT, RL and memory records. Each is a list of dicts — a `RecordList`
    unless a strategy puts a plain list there — that keeps its older records on disk, so appending a
    record per trajectory holds a bounded number in memory: change a record before appending it
    (toolkit.spill says what a RecordList is)."""

    sft: list = field(default_factory=RecordList)
    rl: list = field(default_factory=RecordList)
    memory: list = field(default_factory=RecordList)


def record_meta(raw: Mapping, tags: Iterable[str] = (), **extra) -> dict:
    """meta of a derived record: origin = [raw id] (a synthesised record's own `meta.origin`, the
    raw ids it was made from), tags, meta.env copied when present."""
    made = raw.get("meta") or {}
    if made.get("origin"):   # synthesised: its sources, its own tags and category carry over
        tags = [*made.get("tags", ()), *(t for t in tags if t not in made.get("tags", ()))]
        extra = {**({"category": made["category"]} if made.get("category") else {}), **extra}
    meta = {"origin": list(made.get("origin") or [raw["id"]]), "tags": list(tags), **extra}
    env = env_of(raw)
    if env:
        meta["env"] = copy_json(env)
    return meta


def sft_record(raw: Mapping, weights: Sequence[int] | None = None, id: str | None = None,
               tags: Iterable[str] = (), messages: Sequence[Mapping] | None = None) -> dict:
    """An SFT record of `raw` (or of `messages`, a valid sub-trajectory of it) with one weight per
    assistant message when given. Raises ValueError when the weights do not fit. Its provenance
    names the operator that made the weights or messages (`refinement_weights`, `segment`), else
    `sft_record` kept / masked / segmented (a sub-trajectory), after the steps of `raw`."""
    made = [s for s in (getattr(weights, "step", None), getattr(messages, "step", None)) if s]
    partial = messages is not None and list(messages) != list(raw["messages"])
    messages = list(raw["messages"] if messages is None else messages)
    record = {"id": id or raw["id"], "messages": copy_messages(messages),
              "tools": copy_tools(raw.get("tools")), "meta": record_meta(raw, tags)}
    if weights is not None:
        weights = [int(w) for w in weights]
        n = len(assistant_indices(messages))
        if len(weights) != n or not any(weights):
            raise ValueError(f"{record['id']}: {len(weights)} weights for {n} assistant messages, "
                             f"{sum(weights)} trained")
        record["weights"] = weights
    if not made:
        made = [step("sft_record", "segmented" if partial else "masked" if weights and 0 in weights else "kept")]
    return stamp(record, *made, parent=raw)


def repeated(record: dict, op: str, copy: int) -> dict:
    """`record` (an SFT or RL record built for a copy, in place) stamped as the `copy`-th repeat made
    by operator `op`, so lineage names the operator that repeated it, not the builder."""
    return stamp(record, step(op, "repeated", copy=copy))
