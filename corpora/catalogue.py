"""One tool catalogue per corpus source when the files carry no tool schemas.

A record converted without schemas (tau-bench's historical trajectories, SWE-agent text actions,
ShareGPT and ADP files without `tools`) gets schemas synthesised from its own calls
(`common.ToolSynth`) and `meta.tools_source = "calls"`. Left so, each record lists only the tools
it called, every argument it used required: a model trained on it learns that every listed tool
gets called. After loading, `apply_catalogue` gives every such record of one `source` the same
catalogue — the union of the calls the source's records make, argument types inferred from the
values seen, an argument optional where some call omits it (`meta.tools_source = "catalogue"`).
With `--tools FILE` a user gives the real schemas instead (`read_tools_file`; `meta.tools_source =
"file"`): a record calling a tool the file does not define is refused like any invalid record.
Records that carry their own schemas are never touched. The catalogue is built from the whole
corpus, the next-call benchmark's held-out tenth included: it is the tool surface (names, argument
names and types) that every dev prompt lists as well, not a call or an answer of a held-out record.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from base.errors import UserError
from corpora.common import TOOLS_SOURCE as SOURCE_KEY
from corpora.common import BadRecord, ToolSynth, parsed_args, tools_from
from corpora.stored import StoredRecords


def inferred(record: Mapping) -> bool:
    return ((record.get("meta") or {}).get(SOURCE_KEY)) == "calls"


@dataclass(frozen=True)
class ToolsFile:
    """The real schemas a user passed (`--tools FILE`)."""
    path: str
    sha256: str
    tools: tuple[dict, ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(t["function"]["name"] for t in self.tools)


def read_tools_file(path) -> ToolsFile:
    """A JSON list of OpenAI tools or bare function schemas (or `{"tools": [...]}`); UserError
    naming the file otherwise."""
    import hashlib

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"--tools {path}: cannot read it ({exc.strerror})") from None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"--tools {path}: not a JSON file ({exc}); give a JSON list of OpenAI tool schemas") from None
    if isinstance(doc, dict) and "tools" in doc:
        doc = doc["tools"]
    try:
        tools = tools_from(doc, "tools")
    except BadRecord as exc:
        raise UserError(f"--tools {path}: {exc}; give a JSON list of OpenAI tool schemas") from None
    if not tools:
        raise UserError(f"--tools {path}: holds no tool schema")
    names = [t["function"].get("name") if isinstance(t["function"], dict) else None for t in tools]
    if any(not isinstance(n, str) or not n for n in names) or len(set(names)) != len(names):
        raise UserError(f"--tools {path}: every tool needs its own non-empty name")
    return ToolsFile(str(path.resolve()), hashlib.sha256(data).hexdigest(), tuple(tools))


def with_file_tools(record: dict, tools: ToolsFile) -> dict:
    """A record whose tools were synthesised, with the file's schemas instead."""
    meta = {**(record.get("meta") or {}), SOURCE_KEY: "file"}
    return {**record, "tools": list(tools.tools), "meta": meta}


def catalogue(records: Sequence[Mapping]) -> list[dict]:
    """The union of the tools these records call: argument types as seen (integer and number
    merge into number; conflicting types give an untyped argument), required only where every
    call passes it; in the order the corpus first calls them."""
    synth = ToolSynth()
    for record in records:
        for message in record["messages"]:
            for call in message.get("tool_calls") or ():
                synth.see(call["function"]["name"], parsed_args(call["function"]["arguments"]))
    for record in records:   # a tool a record names but nobody calls (ADP's code tools) is still offered
        for tool in record.get("tools") or ():
            synth.add_name(tool["function"]["name"])
    return synth.tools()


def apply_catalogue(records: Sequence[Mapping], sources: Mapping[str, Sequence[int]]) -> tuple[Sequence[Mapping], dict]:
    """Give every record whose tools were synthesised (`sources`: their positions, by source) its
    source's catalogue; returns (the records, per source {"tools": n, "records": m} for the notice).
    Stored records (corpora.stored) are written again, one at a time; nothing changes without `sources`."""
    if not sources:
        return records, {}
    stored = isinstance(records, StoredRecords)
    catalogues = {source: catalogue(records.subset(indices) if stored else [records[i] for i in indices])
                  for source, indices in sources.items()}
    source_of = {i: source for source, indices in sources.items() for i in indices}

    def given() -> Iterator[Mapping]:
        for i, record in enumerate(records):
            if i in source_of:
                record = {**record, "tools": catalogues[source_of[i]],
                          "meta": {**record["meta"], SOURCE_KEY: "catalogue"}}
            yield record

    summary = {source: {"tools": len(catalogues[source]), "records": len(indices)} for source, indices in sources.items()}
    return (StoredRecords.write(given()) if stored else list(given())), summary


def notice(summary: Mapping[str, Mapping], tools_file: ToolsFile | None, from_file: int = 0) -> str | None:
    """The one line `curate` and `run` print on stderr about the tool lists (None: nothing to say)."""
    if tools_file is not None:
        return (f"{from_file} records without tool schemas take the {len(tools_file.tools)} tools of "
                f"--tools {tools_file.path}") if from_file else None
    if not summary:
        return None
    parts = [f"{v['records']} {k or 'unnamed-source'} records share one catalogue of {v['tools']} tools"
             for k, v in sorted(summary.items())]
    return ("the corpus carries no tool schemas for some records: " + "; ".join(parts) +
            " (the union of the calls made, argument types inferred from the values, an argument optional "
            "where some call omits it, no descriptions); pass the real schemas with --tools FILE")
