"""Progress bars that read well in a terminal and in a log: tqdm when the stream is a terminal;
else one plain line when the stage ends (tqdm's redraws, written to a file, leave every state of
the bar behind — two or three copies of each bar in a run's log)."""
from __future__ import annotations

import os
import sys
import time

RELAYED_TO_TERMINAL = "CURATEEVO_TERMINAL"   # set by a parent that relays a child's output to a terminal


def progress_bar(total: int, desc: str, unit: str, stream=None):
    """A bar with tqdm's `update`, `set_postfix`, `write`, `close` and `n`."""
    stream = stream or sys.stderr
    if getattr(stream, "isatty", lambda: False)() or os.environ.get(RELAYED_TO_TERMINAL) == "1":
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True)
    return LogBar(total, desc, unit, stream)


class LogBar:
    """The bar as a log line: nothing while it runs (lines written through it pass), one line at the end."""

    def __init__(self, total: int, desc: str, unit: str, stream):
        self.total, self.desc, self.unit, self.stream, self.n = total, desc, unit, stream, 0
        self.postfix: dict = {}
        self._started, self._closed = time.monotonic(), False

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, values: dict, refresh: bool = True) -> None:
        self.postfix = dict(values)

    def write(self, text: str, file=None) -> None:
        print(text, file=file or self.stream, flush=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        units = self.unit[:-1] + "ies" if self.unit.endswith("y") else self.unit + "s"   # trajectory → trajectories
        print(f"{self.desc}: {self.n}/{self.total} {units} in {time.monotonic() - self._started:.1f} s{extra}",
              file=self.stream, flush=True)
