"""The run directory (DESIGN: Run directory): resolved config, the append-only journal, and the
stage bookkeeping that lets `resume` continue after a crash or kill at any point.

A stage is done when the journal holds its `stage_done` event and every output it recorded
still exists with the recorded hash; then it is not run again. A torn last journal line (a kill
in the middle of a write) is ignored, and its stage simply runs again.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any, Callable

from evolver.errors import UserError
from evolver.files import atomic_json, is_empty_or_missing, read_json, sha256_path  # sha256_path: importable from here too


class Journal:
    """journal.jsonl: one JSON object per line, appended with a single write and fsync."""

    def __init__(self, path: Path):
        self.path = path

    def append(self, event: dict) -> dict:
        event = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **event}
        line = (json.dumps(event, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return event

    def events(self) -> list[dict]:
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]   # a torn last line is not an event
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


class RunStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.journal = Journal(self.root / "journal.jsonl")

    @classmethod
    def create(cls, root: Path, config: dict) -> "RunStore":
        root = Path(root)
        if not is_empty_or_missing(root):
            raise UserError(f"{root} already exists; resume it with `curateevo resume {root}` or choose a new --name")
        root.mkdir(parents=True, exist_ok=True)
        atomic_json(root / "run.json", config)
        return cls(root)

    @classmethod
    def open(cls, root: Path) -> "RunStore":
        if not (Path(root) / "run.json").is_file():
            raise UserError(f"{root} is not a run directory (no run.json)")
        return cls(root)

    @property
    def config(self) -> dict:
        return read_json(self.root / "run.json")

    def epoch_dir(self, epoch: int) -> Path:
        return self.root / "epochs" / str(epoch)

    def _outputs_intact(self, outputs: dict[str, str]) -> bool:
        for rel, digest in outputs.items():
            path = self.root / rel
            if not path.exists() or sha256_path(path) != digest:
                return False
        return True

    def done(self, epoch: int, stage: str) -> dict | None:
        """The last `stage_done` event of (epoch, stage) whose outputs are intact, else None."""
        for event in reversed(self.journal.events()):
            if event.get("event") == "stage_done" and event.get("epoch") == epoch and event.get("stage") == stage:
                return event if self._outputs_intact(event.get("outputs", {})) else None
        return None

    def stage(self, epoch: int, stage: str, run: Callable[[], Any], outputs: Callable[[Any], list[Path]] | list[Path] = ()) -> Any:
        """Run `stage` once: a recorded, intact result is returned without running it again.

        `run()` returns a JSON-able result and writes its outputs atomically; `outputs` names them
        (or derives them from the result), and their hashes go into the journal.
        """
        done = self.done(epoch, stage)
        if done is not None:
            return done.get("result")
        self.journal.append({"event": "stage_started", "epoch": epoch, "stage": stage})
        try:
            result = run()
        except BaseException as exc:   # recorded for status, log and report; the stage runs again on resume
            error = "interrupted" if isinstance(exc, KeyboardInterrupt) else \
                " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
            self.journal.append({"event": "stage_failed", "epoch": epoch, "stage": stage, "error": error})
            raise
        paths = outputs(result) if callable(outputs) else outputs
        hashes = {Path(p).resolve().relative_to(self.root.resolve()).as_posix(): sha256_path(Path(p)) for p in paths}
        self.journal.append({"event": "stage_done", "epoch": epoch, "stage": stage, "outputs": hashes, "result": result})
        return result
