"""The sandbox's limits and the host checker's caps for the corpus at hand, said before the work.

The defaults (sandbox.executor.Limits, sandbox.artifact_records.CAPS) were fixed for small
corpora, but a correct strategy's output and time grow with its corpus: at 10^6 trajectories
AgentRefine was refused after 11 minutes when its SFT file passed the 2 GiB file cap
(docs/results/scale.md). So `for_corpus` raises each limit still at its default to a multiple of
the corpus where that is larger. A limit a caller set to another value (`--timeout 600`) is kept
as given; one left at its default (`--timeout` not given, or given as the default) follows the
corpus. A corpus whose multiples are all below the defaults gets exactly the defaults: it is
curated, recorded (execution.json's `limits`) and hashed as before. Past the defaults the
checking host's memory follows the records cap (a 16-byte id digest each, ~140 bytes in all), as
it follows the corpus's own ids already.
"""
from __future__ import annotations

import math
from dataclasses import replace

from sandbox.artifact_records import CAPS, OutputCaps
from sandbox.executor import Limits, gib

DEFAULT_LIMITS, DEFAULT_CAPS = Limits(), CAPS   # what "left at its default" compares with

OUTPUT_PER_BYTE = 16      # the seed writes 6.2× its staged corpus (bench/scale.py's short shape), most in one file: 2.5× room
RECORDS_PER_RECORD = 8    # the seed emits 4.5 records per corpus record there (one SFT, 3.5 RL): 1.8× room
BYTES_PER_RECORD = 2048   # and per staged KiB of long sessions (one RL record a tool call): ρ0 emits 0.26 a KiB of
                          # bench/scale.py's long shape (680,000 records of 2.60 GiB at 10^4), so one per 2 KiB: 1.9× room
SECONDS_PER_MIB = 4       # AgentRefine's slowest sandbox run at 10^5 took 0.92 s per staged MiB (309 s): 4× room
CPU_PER_WALL = 2          # CPU seconds to wall seconds, as the defaults have them (1800 s to 900 s)

LABELS = {"max_file_bytes": "file", "output_dir_bytes": "output folder", "max_output_bytes": "checked output",
          "max_records": "records", "timeout_s": "timeout", "cpu_s": "CPU time"}


def wanted(records: int, size: int) -> dict[str, float]:
    """What a correct strategy may take of each limit on a corpus of `records` records and `size`
    staged bytes (canonical JSONL: `Corpus.staged_bytes`)."""
    seconds = SECONDS_PER_MIB * size / 2**20
    return {"max_file_bytes": OUTPUT_PER_BYTE * size, "output_dir_bytes": OUTPUT_PER_BYTE * size,
            "max_output_bytes": OUTPUT_PER_BYTE * size,
            "max_records": max(RECORDS_PER_RECORD * records, size / BYTES_PER_RECORD),
            "timeout_s": seconds, "cpu_s": CPU_PER_WALL * seconds}


def for_corpus(limits: Limits, records: int, size: int) -> tuple[Limits, OutputCaps, str | None]:
    """The sandbox's limits and the checker's caps for a corpus of `records` records and `size`
    staged bytes: each limit of `limits` and of the default caps still at its default raised to
    `wanted` where that is larger; and one line naming those that rose (None: none did)."""
    want, rose, scaled = wanted(records, size), {}, []
    for given, default in ((limits, DEFAULT_LIMITS), (DEFAULT_CAPS, DEFAULT_CAPS)):
        raised = {name: type(value)(math.ceil(want[name])) for name, value in vars(given).items()
                  if name in want and value == getattr(default, name) and want[name] > value}
        scaled.append(replace(given, **raised))
        rose.update(raised)
    shown = [f"{label} {_shown(name, rose[name])}" for name, label in LABELS.items() if name in rose]
    line = (f"sandbox: a corpus of {records:,} records ({gib(size)} staged) raises the sandbox's limits "
            f"with it: {', '.join(shown)}") if shown else None
    return scaled[0], scaled[1], line


def _shown(name: str, value: float) -> str:
    return gib(value) if name.endswith("bytes") else f"{value:,}" if name == "max_records" else f"{value:,.0f} s"
