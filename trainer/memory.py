"""Memory hints: the top-k memory records by BM25 over their `key`, given to the agent in its
system prompt — one retrieval, `hints(index, messages, tools, own)`, used at evaluation
(environments.runner, for each task) and at training (trainer.data, for each SFT example when the
recipe trains with hints), so the policy reads hints in training as it will at evaluation.

A memory record is `{"id", "key", "content", "tags"?, "meta"?}` (DESIGN: Formats). The index is
`bm25s` (Lucene BM25, English stop words, lower case, word tokens of two or more characters);
the query is the conversation's first user message. Records with no word in common with the query
are never returned, ties keep file order, so retrieval is deterministic. A record about one tool
(`meta.tool`, e.g. a tool signature or an error constraint) is returned only when the task offers
that tool: a hint about a tool the agent cannot call only leads it to call that tool (measured:
the default run's tool-signature memory cost 7 of 186 dev tasks, most of them calls to tools the
task did not offer, docs/results.md). A record never retrieves one made from itself or its own
task: a memory record sharing an origin id (`meta.origin`) or a task id (`meta.env.task_id`,
`meta.task_id`) with the conversation's record is left out (at training, an SFT record's own
trajectory would otherwise be its hint; at evaluation the dev task's id is never in a bank made of
train records, and the host's leakage guard rejects a bank holding a dev or test request).
The hints go after the system text (or after the chat format's default system text when the
conversation has none):

    <system text>

    Hints from earlier experience:
    - <content of the best record>
    - <content of the next one>
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

from base.errors import UserError
from base.files import iter_jsonl
from chat_format import chat_format as cf
from sandbox.exchange import from_file

DEFAULT_K = 3
"""k, the records retrieved per task: at training (hints in the SFT prompts) and at evaluation
(`environments.evaluate.EvalSpec.memory_k`'s default), declared once so both retrieve alike."""
RETRIEVAL = "bm25s, offered tools only, own task and origins excluded"   # metrics.json names the rule a reading was made under
HEADER = "Hints from earlier experience:"
STOPWORDS = "en"


def _tokens(texts: Sequence[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(list(texts), stopwords=STOPWORDS, return_ids=False, show_progress=False)


def read_memory(path: str | Path) -> list[dict]:
    """Memory records from a JSONL file, checked against the memory schema (`file:line: reason`)."""
    from base.schemas import check_memory

    records, seen = [], set()
    for lineno, row in iter_jsonl(path, "memory"):
        try:
            record = from_file("memory", row)
        except (ValueError, TypeError, AttributeError) as exc:
            raise UserError(f"{path}:{lineno}: not a memory record ({exc})") from None
        error = check_memory(record)
        if error:
            raise UserError(f"{path}:{lineno}: {error}")
        if record["id"] in seen:
            raise UserError(f"{path}:{lineno}: duplicate id {record['id']!r}")
        seen.add(record["id"])
        records.append(record)
    return records


class MemoryIndex:
    """BM25 over the `key` of memory records; `retrieve(query)` gives the top `k`."""

    def __init__(self, records: Sequence[Mapping], k: int = DEFAULT_K):
        import bm25s

        if k < 1:
            raise UserError("memory top-k must be at least 1")
        self.records = [dict(r) for r in records]
        self._provenance = [provenance(r) for r in self.records]
        self.k = k
        self._bm25 = None
        keys = _tokens([r["key"] for r in self.records]) if self.records else []
        if any(keys):
            self._bm25 = bm25s.BM25()
            self._bm25.index(keys, show_progress=False)

    @classmethod
    def from_file(cls, path: str | Path, k: int = DEFAULT_K) -> "MemoryIndex":
        return cls(read_memory(path), k)

    def __len__(self) -> int:
        return len(self.records)

    def scores(self, query: str) -> list[float]:
        """One BM25 score per record (0 for every record when the query has no usable word)."""
        words = _tokens([query or ""])[0]
        if self._bm25 is None or not words:
            return [0.0] * len(self.records)
        return [float(s) for s in self._bm25.get_scores(words)]

    def retrieve(self, query: str, k: int | None = None, offered: Iterable[str] | None = None,
                 exclude: frozenset = frozenset()) -> list[dict]:
        """The best `k` records whose key shares a word with `query`, best first (ties: file order);
        with `offered` (the task's tool names), none about a tool outside it; none whose
        `provenance` meets `exclude`."""
        allowed = None if offered is None else {*offered, None}   # None: a record about no one tool
        scored = [(s, i) for i, s in enumerate(self.scores(query))
                  if s > 0 and (allowed is None or about_tool(self.records[i]) in allowed)
                  and not (exclude and exclude & self._provenance[i])]
        scored.sort(key=lambda si: (-si[0], si[1]))
        return [self.records[i] for _, i in scored[: k or self.k]]


def hints(index: MemoryIndex, messages: Sequence[Mapping], tools: Sequence[Mapping],
          own: Mapping | None = None) -> list[dict]:
    """THE retrieval, at training and at evaluation alike: the top-k records for a conversation
    (query: its first user message), none about a tool outside `tools` (the tools the conversation
    offers), none made from `own` (the conversation's record: an SFT record at training, the task
    at evaluation) or from its task."""
    return index.retrieve(query_of(messages), offered=[tool_name(t) for t in tools],
                          exclude=provenance(own) if own else frozenset())


def provenance(record: Mapping) -> frozenset:
    """What a record was made from: its origin ids (`meta.origin`) and task ids (`meta.env.task_id`,
    `meta.task_id`), tagged so that an origin id never equals a task id."""
    meta = record.get("meta") or {}
    origin = meta.get("origin") or []
    tasks = [meta.get("task_id"), (meta.get("env") or {}).get("task_id") if isinstance(meta.get("env"), Mapping) else None]
    return frozenset([f"origin:{o}" for o in (origin if isinstance(origin, list) else [origin]) if isinstance(o, str)]
                     + [f"task:{t}" for t in tasks if isinstance(t, str)])


def tool_name(tool: Mapping) -> str:
    """A tool's name, from an OpenAI schema ({"type": "function", "function": {...}}) or a bare one."""
    return tool.get("function", tool).get("name", "")


def about_tool(record: Mapping) -> str | None:
    """The tool a memory record is about (`meta.tool`), None when it is about no one tool."""
    tool = (record.get("meta") or {}).get("tool")
    return tool if isinstance(tool, str) else None


def hint_block(records: Sequence[Mapping]) -> str:
    """The text added to the system prompt ("" without records)."""
    if not records:
        return ""
    return "\n".join([HEADER, *("- " + " ".join(r["content"].split()) for r in records)])


def inject(messages: Sequence[Mapping], records: Sequence[Mapping]) -> list[dict]:
    """`messages` with the hints of `records` appended to the system message (one is added,
    with the chat format's default text, when there is none). Without records: a plain copy."""
    out = [dict(m) for m in messages]
    block = hint_block(records)
    if not block:
        return out
    if out and out[0].get("role") == "system":
        system = out[0].get("content") or ""
        out[0]["content"] = (system + "\n\n" if system else "") + block
    else:
        out.insert(0, {"role": "system", "content": cf.DEFAULT_SYSTEM + "\n\n" + block})
    return out


def query_of(messages: Sequence[Mapping]) -> str:
    """The retrieval query of a conversation: its first user message."""
    for m in messages:
        if m.get("role") == "user":
            return m.get("content") or ""
    return ""
