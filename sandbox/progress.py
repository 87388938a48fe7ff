"""Live progress of a curation: the runtime's lines on stderr, and the host's reading of them.

Inside the sandbox, `LazyCorpus` counts the records it decodes in `DECODED` and the runtime the
records it writes in `WRITTEN`; a `Reporter` reads the clock once every `CHECK_EVERY` of them and
prints one line, `MARKER` then `phase=curating read=N records=N written=N seconds=N`, at most once
every `INTERVAL_S` (so none at all for a curation shorter than that). On the host, `ProgressFilter`
takes those lines out of the child's stderr as they arrive, so the stderr an `Execution` keeps (whose
last line a failure reason quotes) holds only what the strategy wrote, and hands each to the caller
as a sentence. Nothing of it reaches an artifact, the manifest or `execution.json`. The host's own
long step after it, the check of the artifacts, says how far it is through a `Watch`.
"""
from __future__ import annotations

import re
import sys
import threading
import time
from typing import Callable

MARKER = "[curateevo runtime] progress: "
INTERVAL_S = 5.0     # the least time between two lines (a test's strategy may shrink it: it runs in the runtime)
CHECK_EVERY = 1000   # records counted between two reads of the clock
_LINE = re.compile(rb"phase=(curating|writing) read=(\d{1,15}) records=(\d{1,15}) written=(\d{1,15}) seconds=(\d{1,9})")
_LONGEST = len(MARKER) + 120   # a progress line's bytes at most: a longer one is the strategy's text


class Counter:
    """A count of records that calls `listener()` every CHECK_EVERY of them (one call and an
    addition a record: the clock is the listener's, a thousand records apart)."""

    def __init__(self):
        self.count, self.listener = 0, None

    def add(self) -> None:
        self.count += 1
        if self.count % CHECK_EVERY == 0 and self.listener is not None:
            self.listener()


DECODED = Counter()   # records decoded by every LazyCorpus and view together
WRITTEN = Counter()   # records written to the artifact files


class Reporter:
    """The runtime's side: listens to both counters from its construction and prints a line on
    `stream` when INTERVAL_S has passed since the last one (or since the start)."""

    def __init__(self, records: int, stream=None, started: float | None = None):
        self.records, self.stream, self.phase = records, stream or sys.stderr, "curating"
        self.started = time.monotonic() if started is None else started
        self.last = self.started
        DECODED.listener = WRITTEN.listener = self.check

    def writing(self) -> None:
        self.phase = "writing"
        self.check()

    def check(self) -> None:
        now = time.monotonic()
        if now - self.last < INTERVAL_S:
            return
        self.last = now
        self.stream.write(f"{MARKER}phase={self.phase} read={DECODED.count} records={self.records} "
                          f"written={WRITTEN.count} seconds={now - self.started:.0f}\n")
        self.stream.flush()


def duration(seconds: int) -> str:
    """`42 s`, `3 min 10 s`, `1 h 05 min`."""
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def sentence(line: bytes) -> str | None:
    """A progress line (after its marker, without its newline) as the host says it; None when it is
    not one the runtime writes (the host prints numbers it parsed, never the candidate's text)."""
    match = _LINE.fullmatch(line.rstrip(b"\r"))
    if match is None:
        return None
    phase, read, records, written, seconds = match.group(1).decode(), *map(int, match.groups()[1:])
    if phase == "writing":
        done = f"writing artifacts, {written:,} records written"
    elif read <= records:
        done = f"{read:,} of {records:,} records read"
    else:   # a strategy that reads the corpus more than once
        done = f"{read:,} reads of {records:,} records"
    return f"curation: {done} ({duration(seconds)})"


class ProgressFilter:
    """The host's side, over a stderr stream fed chunk by chunk: progress lines go to `on_progress`
    (when given) as sentences, everything else to `keep` unchanged. It holds back at most a
    progress line's length (the start of a marker, or a progress line waiting for its newline)."""

    def __init__(self, keep: Callable[[bytes], None], on_progress: Callable[[str], None] | None = None):
        self.keep, self.on_progress, self.pending = keep, on_progress, b""

    def feed(self, chunk: bytes) -> None:
        data, self.pending = self.pending + chunk, b""
        marker, kept, text_from, search, text_to = MARKER.encode(), [], 0, 0, None
        while (at := data.find(marker, search)) != -1:
            end = data.find(b"\n", at)
            if end == -1:
                if len(data) - at <= _LONGEST:   # the rest of the line comes in a later chunk
                    text_to = at
                break
            said = sentence(data[at + len(marker):end])
            if said is None:   # not the runtime's line: the strategy's text, kept
                search = at + 1
                continue
            if self.on_progress is not None:
                self.on_progress(said)
            kept.append(data[text_from:at])
            text_from = search = end + 1
        if text_to is None:   # a chunk that ends inside a marker: its start waits for the rest
            text_to = len(data) - next((k for k in range(len(marker) - 1, 0, -1) if data.endswith(marker[:k])), 0)
        kept.append(data[text_from:text_to])
        self.pending = data[max(text_to, text_from):]
        text = b"".join(kept)
        if text:
            self.keep(text)

    def close(self) -> None:
        """The end of the stream: what was held back is the strategy's text."""
        if self.pending:
            self.keep(self.pending)
            self.pending = b""


class Watch:
    """A host step with no lines of its own, watched: while the `with` block runs, a daemon thread
    hands `on_progress` the sentence `say(seconds so far)` every INTERVAL_S (nothing when the step
    is shorter, or without `on_progress`)."""

    def __init__(self, on_progress: Callable[[str], None] | None, say: Callable[[int], str]):
        self.on_progress, self.say, self.done = on_progress, say, threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "Watch":
        if self.on_progress is not None:
            self.started = time.monotonic()
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    def _watch(self) -> None:
        while not self.done.wait(INTERVAL_S):
            self.on_progress(self.say(round(time.monotonic() - self.started)))
