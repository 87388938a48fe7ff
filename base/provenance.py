"""Record provenance, the host's side: the digest a toolkit stamp carries, and the steps the host
stores (curation_strategies/toolkit/provenance.py stamps; this module is stdlib only so both the
runtime's toolkit and the checker use the one definition).

A stamp in a record the strategy wrote is `meta.provenance = {"steps": [...], "sha": DIGEST}`.
The checker replaces it by its steps when DIGEST is the record's digest, and by its steps plus a
`custom` step when the record was changed after the stamp (or holds no well-formed stamp with a
digest: only `custom`). What is stored is a list: `meta.provenance = [{"op", "how", "params"?}, …]`."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping   # not typing's: isinstance runs per record
from typing import Any

KEY = "provenance"
HOWS = ("kept", "masked", "truncated", "segmented", "synthesised", "repeated", "validated", "asked_llm", "custom")
CUSTOM = {"op": "custom", "how": "custom"}
DROPPED = "dropped.jsonl"   # an output's optional notes of what operators dropped: {"kind", "id", "op"} a line
DROP_KINDS = ("raw", "sft", "rl", "memory")   # what a dropped id names: a raw trajectory, or a record of a kind


def digest(record: Mapping, encode: Callable[[dict], bytes] | None = None) -> str:
    """The hash a stamp carries: the record in canonical JSON with the stamp's own `sha` left out
    (`encode` writes those same bytes, UTF-8: the checker's base.canonical.record_bytes)."""
    meta = record.get("meta")
    stamp = meta.get(KEY) if isinstance(meta, Mapping) else None
    if isinstance(stamp, Mapping) and "sha" in stamp:
        record = {**record, "meta": {**meta, KEY: {k: v for k, v in stamp.items() if k != "sha"}}}
    data = (encode(record) if encode is not None and type(record) is dict else
            json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                       allow_nan=False).encode("utf-8", "surrogatepass"))
    return hashlib.sha256(data).hexdigest()[:16]


def well_formed(steps: Any) -> bool:
    return (isinstance(steps, list) and bool(steps)
            and all(isinstance(s, Mapping) and isinstance(s.get("op"), str) and s.get("how") in HOWS
                    and isinstance(s.get("params", {}), Mapping) for s in steps))


def steps_of(record: Mapping, encode: Callable[[dict], bytes] | None = None) -> list[dict]:
    """The steps a record's stamp names, with a `custom` step after them when the record is not
    what its stamp says (or carries no stamp)."""
    meta = record.get("meta")
    stamp = meta.get(KEY) if isinstance(meta, Mapping) else None
    if not isinstance(stamp, Mapping) or not isinstance(stamp.get("sha"), str) or not well_formed(stamp.get("steps")):
        return [dict(CUSTOM)]   # no stamp, or one no toolkit operator wrote: nothing it claims is kept
    steps = [dict(s) for s in stamp["steps"]]
    try:
        intact = stamp.get("sha") == digest(record, encode)
    except (TypeError, ValueError, RecursionError):
        intact = False
    return steps if intact else steps + [dict(CUSTOM)]


def settle(record: dict, encode: Callable[[dict], bytes] | None = None) -> dict:
    """The record as the host stores it (in place): `meta.provenance` = its checked steps."""
    meta = record.get("meta")
    if not isinstance(meta, dict):
        meta = record["meta"] = {}
    meta[KEY] = steps_of(record, encode)
    return record
