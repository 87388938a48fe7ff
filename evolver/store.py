"""The run directory (DESIGN: Run directory): resolved config, the append-only journal, and the
stage bookkeeping that lets `resume` continue after a crash or kill at any point.

A stage is done when the journal holds its `stage_done` event and every output it recorded
still exists with the recorded hash; then it is not run again. A torn last journal line (a kill
in the middle of a write) is ignored, and its stage simply runs again. A line that is not an
event anywhere else (torn by a full disk, edited by hand) is skipped with one warning naming
`journal.jsonl:LINE`: what it recorded counts as not done, so its stage runs again, which is
safe because every stage writes its outputs atomically.

One writer at a time: the first journal append takes an exclusive `flock` on `RUN/.lock`, held
until the process ends (the kernel drops it on kill -9 too); a second process that would write
the run (a `resume` beside a running `run`) refuses in one sentence. Readers (`log`, `status`)
take no lock.
"""
from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from base.errors import UserError, printable
from base.files import atomic_json, is_empty_or_missing, read_json, sha256_path, writable_parent  # sha256_path: importable from here too
from base import registry
from experiments.journal import JOURNAL_FILE, Event, StageDone, StageFailed, StageStarted, done as done_events, read as read_events
from sandbox import package_lock

_HELD: dict[str, int] = {}       # run root → fd holding its lock in this process


def lock_run(root: Path) -> None:
    """Take the run's writer lock (once per process), or UserError when another process holds it."""
    key = str(Path(root).resolve())
    if key in _HELD:
        return
    fd = os.open(Path(root) / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise UserError(f"{printable(root)} is being written by another curateevo process (pid {printable(holder)}); "
                        f"wait for it to end or stop it before resuming") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[key] = fd
    Journal(Path(root) / JOURNAL_FILE).truncate_torn_tail()   # the new writer repairs before its first write


def writer_active(root: Path) -> bool:
    """Whether a process (this one or another) holds the run's writer lock now: a run in progress."""
    if str(Path(root).resolve()) in _HELD:
        return True
    path = Path(root) / ".lock"
    if not path.is_file():
        return False
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)   # taken at once: nobody writes
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


class Journal:
    """journal.jsonl: one JSON object per line, appended with a single write and fsync."""

    def __init__(self, path: Path):
        self.path = path

    def append(self, event: Event) -> Event:
        """`event` (experiments.journal's types) as one line, stamped with the time."""
        lock_run(self.path.parent)
        doc = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **event.doc}
        line = (json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return type(event)(doc)

    def truncate_torn_tail(self) -> None:
        """A kill during a write leaves a last line without its newline: cut it (it recorded
        nothing), saying so, so that the next event starts on a line of its own."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            os.truncate(self.path, keep)
            print(f"curateevo: note: {printable(self.path)} ended in a torn line ({len(data) - keep} bytes, a kill "
                  "during a write); truncated, so what it was recording runs again", file=sys.stderr, flush=True)

    def events(self) -> list[Event]:
        """Every event, in order, typed (experiments.journal.read: a torn last line is no event; a
        line that is not an event anywhere else is UserError naming it)."""
        return read_events(self.path)


PARTIAL = ".partial-run"   # the suffix of a run directory being created


def half_made(root: Path) -> bool:
    """Whether `root` is what an older curateevo, killed while creating a run, left: a directory
    holding no run.json, only its lock and run.json's temporary file. Nothing of such a run ran."""
    try:
        names = [p.name for p in Path(root).iterdir()] if not Path(root).is_symlink() else None
    except OSError:
        return False
    return bool(names) and all(n == ".lock" or (n.startswith(".run.json.") and n.endswith(".tmp")) for n in names)


def not_a_run(root: Path) -> str:
    """What to do with a directory that has no run.json: the one fix `resume` and `run` both name."""
    again = f"curateevo run --runs-dir {root.parent} --name {root.name}"
    if half_made(root):
        return (f"{root} is a run killed while it was being created (no run.json: nothing of it ran); start it "
                f"again with `{again}`, which replaces it")
    if not root.is_dir():
        return f"{root} is not a run directory (nothing is there); start a run with `{again}`"
    return f"{root} is not a run directory (no run.json); name a run directory, or start a run with `{again}`"


def taken(root: Path) -> str:
    """Why a new run cannot be created at `root`, which holds something (not a half-made run)."""
    return (f"{root} already exists; resume it with `curateevo resume {root}` or choose a new --name"
            if (Path(root) / "run.json").is_file() else
            f"{root} exists and is not a run directory (no run.json); choose a new --name")


class RunStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.journal = Journal(self.root / JOURNAL_FILE)

    @classmethod
    def create(cls, root: Path, config: dict, fill: Callable[[Path], None] | None = None) -> "RunStore":
        """A new run directory, whole or not at all: built under a temporary name beside `root`
        (run.json, environment.json, then what `fill` writes into it) and renamed into place, so a
        kill at any moment leaves either no run or a whole one, never a directory without run.json."""
        from sandbox import leftovers

        root = Path(root)
        leftovers.reap_folders(root.parent.glob(".*" + PARTIAL))   # of runs killed while being created
        if half_made(root) and not writer_active(root):
            shutil.rmtree(root)
            print(f"curateevo: removed {printable(root)}, a run killed while it was being created (it had no "
                  "run.json); creating it again", file=sys.stderr, flush=True)
        if not is_empty_or_missing(root):
            raise UserError(taken(root))
        writable_parent(root, "the run directory")
        partial = Path(tempfile.mkdtemp(prefix=f".{root.name}-", suffix=PARTIAL, dir=root.parent))
        try:
            leftovers.claim(partial)   # the next create removes it if this process is killed now
            atomic_json(partial / "run.json", config)
            atomic_json(partial / "environment.json", package_lock.lock_record())   # replay compares with it
            if fill is not None:
                fill(partial)
            (partial / leftovers.OWNER_FILE).unlink()
            os.chmod(partial, 0o755)   # mkdtemp's 0700 is no run directory's mode
            os.rename(partial, root)   # replaces an empty directory; fails on anything else
        except OSError as exc:
            raise UserError(f"cannot create the run directory {root}: {exc.strerror or exc} (another process "
                            "may have created it meanwhile); choose a new --name") from None
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        lock_run(root)
        return cls(root)

    @classmethod
    def open(cls, root: Path) -> "RunStore":
        if not (Path(root) / "run.json").is_file():
            raise UserError(not_a_run(Path(root)))
        store = cls(root)
        _ = store.config   # a damaged run.json is refused here, before any work
        return store

    def lock(self) -> None:
        """Become the run's one writer now (appending to the journal does it anyway)."""
        lock_run(self.root)

    @property
    def config(self) -> dict:
        path = self.root / "run.json"
        try:
            config = read_json(path)
        except (OSError, ValueError) as exc:   # UnicodeDecodeError is a ValueError
            raise UserError(f"{path} cannot be read as JSON ({printable(exc, 200)}): the run's configuration is "
                            f"damaged; restore it from a backup or start a new run") from None
        if not isinstance(config, dict):
            raise UserError(f"{path} holds {type(config).__name__}, not the run's configuration object; "
                            f"restore it from a backup or start a new run")
        if "benchmark" in config:   # a run made before issue 61 names its benchmark by its old name
            config["benchmark"] = registry.current(config["benchmark"])
        return config

    def writer_active(self) -> bool:
        """A process is writing this run now (it holds RUN/.lock)."""
        return writer_active(self.root)

    def epoch_dir(self, epoch: int) -> Path:
        return self.root / "epochs" / str(epoch)

    def _outputs_intact(self, outputs: dict[str, str]) -> bool:
        for rel, digest in outputs.items():
            path = self.root / rel
            if not path.exists() or sha256_path(path) != digest:
                return False
        return True

    def done(self, epoch: int, stage: str) -> StageDone | None:
        """The last `stage_done` event of (epoch, stage) whose outputs are intact, else None."""
        for event in reversed(done_events(self.journal.events(), stage)):
            if event.epoch == epoch:
                return event if self._outputs_intact(event.outputs) else None
        return None

    def stage(self, epoch: int, stage: str, run: Callable[[], Any], outputs: Callable[[Any], list[Path]] | list[Path] = ()) -> Any:
        """Run `stage` once: a recorded, intact result is returned without running it again.

        `run()` returns a JSON-able result and writes its outputs atomically; `outputs` names them
        (or derives them from the result), and their hashes go into the journal.
        """
        done = self.done(epoch, stage)
        if done is not None:
            return done.result
        self.journal.append(StageStarted.of(epoch, stage))
        try:
            result = run()
        except BaseException as exc:   # recorded for status, log and report; the stage runs again on resume
            error = "interrupted" if isinstance(exc, KeyboardInterrupt) else \
                " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
            self.journal.append(StageFailed.of(epoch, stage, error))
            raise
        paths = outputs(result) if callable(outputs) else outputs
        hashes = {Path(p).resolve().relative_to(self.root.resolve()).as_posix(): sha256_path(Path(p)) for p in paths}
        self.journal.append(StageDone.of(epoch, stage, hashes, result))
        return result
