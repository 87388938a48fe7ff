"""The next-call benchmark as an environment (`base.environment`): a user's corpus without an
executable environment. It declares one capability, `held_out`: its dev set is the corpus's own
held-out tenth, scored step by step with call_f1 (no episodes); it has no ctx.env scenarios, no gold tasks of its own for the leakage guard
(the held-out records never reach the sandbox), and no scenario for the `state_match` reward. Its
judge names a failure family directly in the error type (`next-call:<family>`: `family_prefix`), so
it has no checker rules.
"""
from __future__ import annotations

import json
import re
import tempfile
from collections import OrderedDict
from typing import Any, Mapping, Sequence

RECENT = 2   # benchmarks a process keeps for the same corpus bytes and options (a run: its launch's checks, each evaluation)
_recent: OrderedDict = OrderedDict()


class NextCallEnvironment:
    name = "next-call"
    executable = False
    metrics = ("call_f1",)
    single_step = False
    family_prefix = "next-call:"   # environments/next_call/scoring.py writes the error types

    def benchmark(self, **options: Any):
        """The benchmark of a corpus's held-out parts; the same one again for the same corpus bytes
        and options (its split and sizes read every record: seconds at 10^5 trajectories)."""
        from corpora import corpus_sha256
        from environments.next_call.benchmark import NextCallBenchmark

        corpus = options.get("corpus")
        choices = (json.dumps(options, sort_keys=True, default=str), tempfile.gettempdir())   # where its records are kept
        if corpus is not None and any(key[:-1] == choices for key in _recent):   # else nothing to find
            key = (*choices, corpus_sha256(corpus))
            if key in _recent:
                _recent.move_to_end(key)
                return _recent[key]
        bench = NextCallBenchmark(**options)
        if corpus is not None:
            _recent[(*choices, bench.corpus_sha256)] = bench   # the bytes it read
            while len(_recent) > RECENT:
                _recent.popitem(last=False)
        return bench

    def train_view(self, corpus: Any, holdout: Mapping | None = None) -> Any:
        """The train part the strategy may see: the held-out dev and test parts never reach it
        (`holdout`: the run's recorded spec, corpora.split)."""
        from corpora import train_part

        return train_part(corpus, holdout)

    def dev_corpus(self, paths: Sequence[str]) -> list[str] | None:
        return list(paths)

    def holds_out_corpus(self) -> bool:
        return True

    def task_score(self, trajectory: Mapping) -> float:
        """A held-out record's call F1 (its reward), not its all-or-nothing success."""
        return float(trajectory["outcome"]["reward"])

    def category_of(self, task_id: str) -> str:
        """A held-out record's id without a trailing number (as for BFCL's task ids)."""
        return re.sub(r"^multi_turn_", "", re.sub(r"_\d+$", "", task_id))
