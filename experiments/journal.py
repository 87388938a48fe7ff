"""A run's journal (RUN/journal.jsonl), typed: its events and the one reader of the file.

The loop's store (evolver.store) appends the events; everything that reads a run — the loop on
resume, `log` and `status`, the report, trace, repair, `test`, and the quality bench's rows of a
run (experiments/quality/rows.py) — reads them here, so the format is spelled in one module on
the floor below the loop. An event keeps its object exactly as written (`doc`: what the store
appended, byte for byte once encoded) and gives its fields by name; the `event` key picks the
class (`StageStarted`, `StageDone`, `StageFailed`, `Preflight`, `LLMMoved`, `Tested`; an unknown one is an
`Event`). `RunRecord` is a finished run as the bench reads it: its journal and the two fields of
run.json a row needs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

from base.errors import UserError, printable

JOURNAL_FILE = "journal.jsonl"
CONFIG_FILE = "run.json"


@dataclass(frozen=True)
class Event:
    """One journal line: `doc` is its object as written; the fields every event may carry."""
    doc: Mapping[str, Any]
    KIND: ClassVar[str | None] = None

    @property
    def kind(self) -> str | None:
        return self.doc.get("event")

    @property
    def time(self) -> str | None:
        """When the store appended it (UTC, ISO seconds)."""
        return self.doc.get("time")

    @property
    def epoch(self) -> Any:
        return self.doc.get("epoch")

    @property
    def stage(self) -> str | None:
        return self.doc.get("stage")

    def is_done(self, stage: str | None = None) -> bool:
        """A `stage_done` event (of `stage`, when named)."""
        return isinstance(self, StageDone) and (stage is None or self.stage == stage)


@dataclass(frozen=True)
class StageStarted(Event):
    KIND: ClassVar[str] = "stage_started"

    @classmethod
    def of(cls, epoch: int, stage: str) -> "StageStarted":
        return cls({"event": cls.KIND, "epoch": epoch, "stage": stage})


@dataclass(frozen=True)
class StageDone(Event):
    """A stage finished: the sha256 of each output it recorded, and its result (evolver.results' journal forms)."""
    KIND: ClassVar[str] = "stage_done"

    @classmethod
    def of(cls, epoch: int, stage: str, outputs: Mapping[str, str], result: Any) -> "StageDone":
        return cls({"event": cls.KIND, "epoch": epoch, "stage": stage, "outputs": outputs, "result": result})

    @property
    def outputs(self) -> Mapping[str, str]:
        return self.doc.get("outputs") or {}

    @property
    def result(self) -> Any:
        return self.doc.get("result")

    @property
    def llm(self) -> Mapping | None:
        """The LLM usage the stage caused (its result's `llm`), or None."""
        return self.result.get("llm") if isinstance(self.result, Mapping) else None


@dataclass(frozen=True)
class StageFailed(Event):
    KIND: ClassVar[str] = "stage_failed"

    @classmethod
    def of(cls, epoch: int, stage: str, error: str) -> "StageFailed":
        return cls({"event": cls.KIND, "epoch": epoch, "stage": stage, "error": error})

    @property
    def error(self) -> str:
        return self.doc.get("error", "")


@dataclass(frozen=True)
class Preflight(Event):
    """The LLM request `run` made before epoch 0 to check the endpoint."""
    KIND: ClassVar[str] = "preflight"

    @classmethod
    def of(cls, llm: Mapping) -> "Preflight":
        return cls({"event": cls.KIND, "llm": llm})

    @property
    def llm(self) -> Mapping:
        return self.doc.get("llm") or {}


@dataclass(frozen=True)
class LLMMoved(Event):
    """`resume --base-url`: the run's LLM answers at another URL from here on (run.json keeps the first)."""
    KIND: ClassVar[str] = "llm_moved"

    @classmethod
    def of(cls, base_url: str, was: str | None, llm: Mapping) -> "LLMMoved":
        return cls({"event": cls.KIND, "base_url": base_url, "was": was, "llm": llm})

    @property
    def base_url(self) -> str:
        return self.doc.get("base_url", "")


@dataclass(frozen=True)
class Tested(Event):
    """One reading of the test split (`curateevo test`): the final strategy's P, and the paired
    comparison with ρ0 (evolver.tested.record's fields, kept in `doc`)."""
    KIND: ClassVar[str] = "tested"

    @classmethod
    def of(cls, epoch: int, P: float | None, metric: str, reading: int, **comparison) -> "Tested":
        return cls({"event": cls.KIND, "epoch": epoch, "P": P, "metric": metric, "reading": reading, **comparison})

    @property
    def P(self) -> float | None:
        return self.doc.get("P")

    @property
    def metric(self) -> str | None:
        return self.doc.get("metric")

    @property
    def reading(self) -> int | None:
        """1 for the first reading of the run's test split; more: `test --again`."""
        return self.doc.get("reading")


KINDS = {c.KIND: c for c in (StageStarted, StageDone, StageFailed, Preflight, LLMMoved, Tested)}


def event(doc: Mapping[str, Any]) -> Event:
    """The typed event of one journal object."""
    return KINDS.get(doc.get("event"), Event)(doc)


def read(path: Path) -> list[Event]:
    """Every event of the journal at `path`, in order ([] when there is none). A torn last line (no
    newline yet: a kill during a write) is no event; a line that is not an event anywhere else means
    the journal was damaged: UserError naming it."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]   # a torn last line is not an event
    events = []
    for lineno, line in enumerate(complete.split(b"\n")[:-1], 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:   # UnicodeDecodeError included
            doc = None
        if not isinstance(doc, dict):
            raise UserError(f"{printable(path)}:{lineno} is not a journal event: the journal was damaged "
                            "in the middle (not by a kill, which only tears the last line); restore it from a "
                            "backup, or start a new run")
        events.append(event(doc))
    return events


def done(events: Sequence[Event], stage: str | None = None) -> list[StageDone]:
    """The `stage_done` events (of `stage`, when named), in order."""
    return [e for e in events if isinstance(e, StageDone) and (stage is None or e.stage == stage)]


def results(events: Sequence[Event], stage: str) -> list:
    """The results `stage` recorded, in order (a stage_done without one is left out)."""
    return [e.result for e in done(events, stage) if e.result]


def of_kind(events: Sequence[Event], kind: type[Event]) -> list:
    """The events of one class (`Tested`: every reading of the test split), in order."""
    return [e for e in events if isinstance(e, kind)]


@dataclass(frozen=True)
class RunRecord:
    """A run directory as a reader below the loop sees it (the quality bench's rows of a run)."""
    root: Path
    events: Sequence[Event]
    config: Mapping[str, Any]
    """run.json's object (evolver.config.RunConfig's dump)."""

    @classmethod
    def open(cls, root: Path) -> "RunRecord":
        """The run at `root`, or UserError when it is no run directory (no run.json)."""
        root = Path(root)
        if not (root / CONFIG_FILE).is_file():
            raise UserError(f"{root} is not a run directory (no {CONFIG_FILE})")
        config = json.loads((root / CONFIG_FILE).read_text(encoding="utf-8"))
        return cls(root, read(root / JOURNAL_FILE), config)

    @property
    def corpus_sha256(self) -> str | None:
        """The hash of the corpus the run evolved on."""
        return self.config.get("corpus_sha256")

    @property
    def ablations(self) -> list[str]:
        """The run's ablations, sorted."""
        return sorted(self.config.get("ablations", []))

    def results(self, stage: str) -> list:
        return results(self.events, stage)
