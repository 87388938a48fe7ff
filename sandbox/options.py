"""Options of the commands that execute a strategy or read a corpus (curate, replay, repair, eval,
bench quality), declared once: `--sandbox`, the curation `--timeout`, and `--corpus` with its
`--tools` and `--on-bad-line`. `run` declares the same settings as fields of its config
(evolver/config.py); the names, choices and defaults here are the same."""
from __future__ import annotations

from base.errors import positive_seconds
from base.options import add_on_bad_line
from sandbox.executor import EXECUTORS, Limits


def add_sandbox(parser, what: str = "the strategy", default: str | None = "auto", shown: str = "auto") -> None:
    """`--sandbox auto|docker|process` (the executor registry's names)."""
    parser.add_argument("--sandbox", default=default, choices=["auto", *EXECUTORS],
                        help=f"executor of {what} (default: {shown})")


def add_timeout(parser) -> None:
    """`--timeout S`: a curation's wall-clock limit (sandbox.executor.Limits)."""
    parser.add_argument("--timeout", type=positive_seconds, default=Limits.timeout_s,
                        help=f"curation wall-clock limit in seconds (default {Limits.timeout_s:g}, "
                             "raised with a large corpus: sandbox/corpus_limits.py)")


def add_corpus(parser, corpus: str, tools: str, bad_lines: str | None = "corpus") -> None:
    """`--corpus F|DIR ...`, `--tools F` and (unless `bad_lines` is None) `--on-bad-line abort|skip`."""
    parser.add_argument("--corpus", nargs="+", help=corpus)
    parser.add_argument("--tools", help=tools)
    if bad_lines is not None:
        add_on_bad_line(parser, bad_lines)
