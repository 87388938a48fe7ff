"""The executor interface: run one candidate's curation under limits and say how it ended.

An executor gets a `CurationJob` (a private copy of the strategy files, the canonical corpus,
an empty output directory) and returns an `Execution`. It never judges the output: that is the
host-side checker's job. An executor that can also run the code agent's shell commands over a
plain checkout implements `CommandRunner`. Executors are registered by name in EXECUTORS
(most isolating first: `auto` takes the first whose engine answers); a new one is one module
plus one line there.
"""
from __future__ import annotations

import json

import importlib
import os
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Callable, Protocol, runtime_checkable

from base.errors import RunFailed, UserError
from sandbox.progress import ProgressFilter
from sandbox.runtime import PEAK_LINE

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution. Defaults fit a 2-core / 24 GiB machine; a curation raises
    those still at their defaults with a large corpus (sandbox/corpus_limits.py)."""

    timeout_s: float = 900.0          # wall clock; the whole process group / container is killed
    cpu_s: int = 1800                 # CPU seconds
    memory_bytes: int = 8 * 2**30     # address space (process) / memory cgroup (Docker)
    max_processes: int = 64
    max_file_bytes: int = 2 * 2**30   # largest file the candidate may write
    output_bytes: int = 64 * 2**10    # captured stdout and stderr, each (head and tail)
    output_dir_bytes: int = 4 * 2**30 # all files in the output directory together
    cpus: float = 1.0                 # CPU share (Docker)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CurationJob:
    strategy_dir: Path   # strategy.py + helper modules + inputs/, a private copy (read-only to the candidate)
    corpus_path: Path    # canonical JSONL written by the host
    out_dir: Path        # empty; the only place the candidate may write
    seed: int
    hash_seed: int | None = 0   # PYTHONHASHSEED; None leaves it random (replay then catches set-order leaks)
    env_dir: Path | None = None      # ctx.env's train-split scenario folder (read-only), if any
    llm_socket: Path | None = None   # ctx.llm's channel, a unix socket the host serves, if any
    env_calls: int = 200_000         # ctx.env's call budget
    budget: dict | None = None       # ctx.budget: what the recipe will train on (trainer.recipe.curation_budget)

    def runtime_args(self, strategy: str, corpus: str, out: str, env: str | None = None,
                     llm: str | None = None) -> list[str]:
        """Arguments of `python -m sandbox.runtime`, with paths as the candidate sees them."""
        extra = (["--env", env, "--env-calls", str(self.env_calls)] if env else []) + (["--llm", llm] if llm else [])
        if self.budget is not None:
            extra += ["--budget", json.dumps(self.budget, sort_keys=True, separators=(",", ":"))]
        return ["-m", "sandbox.runtime", "--strategy", strategy, "--corpus", corpus,
                "--out", out, "--seed", str(self.seed), *extra]

    def hash_seed_env(self) -> str:
        return "random" if self.hash_seed is None else str(self.hash_seed)


def reported_peak(stderr: str) -> int | None:
    """The peak resident memory the runtime reported on finishing (None when it did not finish)."""
    at = stderr.rfind(PEAK_LINE)
    digits = (stderr[at + len(PEAK_LINE):].split() or [""])[0] if at >= 0 else ""
    return int(digits) if digits.isdigit() else None


@dataclass
class Execution:
    """How one execution ended. `reason` is one sentence when it did not end well."""

    executor: str
    returncode: int | None
    wall_s: float
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    reason: str | None = None
    isolation: dict = field(default_factory=dict)
    peak_rss_bytes: int | None = None   # what the runtime reported on finishing (sandbox.runtime.report_peak)

    def __post_init__(self):
        if self.peak_rss_bytes is None:
            self.peak_rss_bytes = reported_peak(self.stderr)

    @property
    def ok(self) -> bool:
        return self.reason is None and self.returncode == 0

    def to_json(self) -> dict:
        return asdict(self)


class Executor(Protocol):
    name: str

    def run(self, job: CurationJob, limits: Limits, on_progress: Callable[[str], None] | None = None) -> Execution:
        """`on_progress` gets each of the runtime's progress lines as a sentence while it runs (RuntimeStderr)."""

    def describe(self) -> dict:
        """What this executor isolates on this machine (recorded in execution.json)."""


@dataclass
class CommandResult:
    """How one shell command of the code agent ended (output: stdout and stderr together, bounded)."""
    returncode: int | None
    output: str
    timed_out: bool
    wall_s: float
    reason: str | None


@runtime_checkable
class CommandRunner(Protocol):
    """An executor that can run one shell command over a plain checkout (the code agent's)."""

    def run_command(self, command: str, workdir: Path, limits: Limits) -> CommandResult: ...


# name → "module:class" of each executor (constructed with no arguments, or trusted=True for the
# user's own strategy; RunFailed when its engine does not answer), most isolating first
EXECUTORS: dict[str, str] = {
    "docker": "sandbox.docker_executor:DockerExecutor",
    "process": "sandbox.process_executor:ProcessExecutor",
}


def executor_class(name: str) -> Callable[..., Executor]:
    if name not in EXECUTORS:
        raise UserError(f"unknown sandbox {name!r}: choose auto or one of {', '.join(EXECUTORS)}")
    module, _, attr = EXECUTORS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def make_executor(name: str, *, warn=None, trusted: bool = False) -> Executor:
    """A registered executor by name, or `auto`: the first whose engine answers, with a loud
    warning when that is not the first (never silently; under CI=true, never at all).
    `trusted`: the strategy is the user's own, not a generated candidate (the process executor
    then runs it even where it cannot contain it)."""
    options = {"trusted": True} if trusted else {}
    if name != "auto":
        return executor_class(name)(**options)
    names = list(EXECUTORS)
    for i, candidate in enumerate(names):
        try:
            return executor_class(candidate)(**options)
        except RunFailed as exc:
            if i + 1 == len(names) or os.environ.get("CI", "").lower() in ("1", "true"):
                raise
            (warn or (lambda text: print(text, file=sys.stderr, flush=True)))(
                f"WARNING: {exc}. Falling back to the {names[i + 1]} executor, which isolates less "
                "(execution.json records what it isolates).")
    raise AssertionError("unreachable")


class BoundedTail:
    """The first and last `cap/2` bytes of a stream fed in chunks, and its total length (a flood
    never fills memory, and the traceback at the end of a noisy run is still there)."""

    def __init__(self, cap: int):
        self.half = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        del self.tail[:-self.half or len(self.tail)]

    def text(self) -> str:
        return bounded_text(bytes(self.head), bytes(self.tail), self.total)


class RuntimeStderr(BoundedTail):
    """The runtime's stderr: the strategy's text kept as a `BoundedTail`, the runtime's progress
    lines taken out as they arrive (sandbox.progress) and handed to `on_progress` when given, so
    the last line a failure reason quotes is never one of them."""

    def __init__(self, cap: int, on_progress: Callable[[str], None] | None = None):
        super().__init__(cap)
        self.progress = ProgressFilter(super().feed, on_progress)

    def feed(self, chunk: bytes) -> None:
        self.progress.feed(chunk)

    def text(self) -> str:
        self.progress.close()
        return super().text()


class BoundedReader(threading.Thread):
    """Drains a pipe to the end into `kept` (a `BoundedTail`)."""

    def __init__(self, pipe: IO[bytes], kept: BoundedTail):
        super().__init__(daemon=True)
        self.pipe, self.kept = pipe, kept

    def run(self) -> None:
        for chunk in iter(lambda: self.pipe.read1(65536), b""):   # what has arrived, not a full 64 KiB
            self.kept.feed(chunk)
        self.pipe.close()

    def text(self) -> str:
        return self.kept.text()


def bounded_text(head: bytes, tail: bytes, total: int) -> str:
    """Head and tail of an output stream, with a note of how much was dropped between them."""
    dropped = total - len(head) - len(tail)
    middle = f"\n[... {dropped} bytes not kept ...]\n" if dropped > 0 else ""
    return head.decode("utf-8", errors="replace") + middle + tail.decode("utf-8", errors="replace")


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def memory_reason(cap: int) -> str:
    """Why a candidate the kernel killed at the memory cap was rejected: the cap, its peak, the fix."""
    return (f"killed for memory: the sandbox's cap is {gib(cap)} and the candidate's resident memory reached "
            "it; keep fewer records in memory at once (the corpus is read on access), or give the sandbox more memory")


def failure_reason(returncode: int | None, stderr: str, timed_out: bool, timeout_s: float) -> str | None:
    """One sentence for a candidate that did not exit 0."""
    import signal

    if timed_out:
        return f"timed out after {timeout_s:g} s of wall-clock time; killed"
    if returncode == 0:
        return None
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name
        why = {"SIGXCPU": "CPU time limit reached", "SIGXFSZ": "file size limit reached",
               "SIGKILL": "killed (memory or process limit, or by itself)",
               "SIGSEGV": "crashed (segmentation fault)"}.get(sig, "killed by a signal")
        return f"{why} ({sig})"
    if returncode == 137:
        return "killed (memory limit or SIGKILL, exit 137)"
    last = [line for line in stderr.strip().splitlines() if line.strip() and not line.startswith("[... ")]
    detail = last[-1].strip() if last else "no message"
    if returncode == 3:
        return f"strategy failed: {detail}"
    return f"runtime exited with code {returncode}: {detail}"
