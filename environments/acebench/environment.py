"""ACEBench as an environment (`base.environment`), on the narrow seam: its benchmark, and two
declared capabilities — `leakage` (every item's request and gold calls, so the host keeps them out
of any artifact) and `diagnosis` (its checker's error types as failure families). It builds no
corpus and rebuilds no scenario: nothing is ever curated from ACEBench, which is a held-out test
for runs that evolve elsewhere, or the dev benchmark of a run (`--benchmark acebench`) that trains
on another corpus.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

# the checker's error types, as the benchmark writes them ("acebench:<category>:<type>",
# environments/acebench/checker.py) → the diagnosis's failure families; the first match wins
CHECKER_RULES = (
    (r"^acebench:special_irrelevant:", "unwanted_call"),
    (r"^acebench:special_", "missing_output"),   # the request's flaw was not pointed out
    (r"^acebench:.*(wrong_output_format|official_checker_error)", "unparseable_call"),
    (r"^acebench:.*(function_mismatch|wrong_function_name)", "unknown_tool|wrong_tool"),
    (r"^acebench:.*wrong functions number", "wrong_call_count"),
    (r"^acebench:.*(lack_args|addition_args|type_error|value_error|wrong_param)", "bad_arguments"),
)


class ACEBenchEnvironment:
    name = "acebench"
    metrics = ("task_success",)
    single_step = True   # an answer is one assistant message (the agent items aside)
    user_simulated = True   # agent_multi_turn runs with `user` (environments/user_sim.py), is not run without
    declining = ("special_incomplete", "special_error_param", "special_irrelevant")   # a text naming the flaw, no call

    def benchmark(self, **options: Any):
        from environments.acebench.benchmark import ACEBenchBenchmark

        return ACEBenchBenchmark(**options)

    def category_of(self, task_id: str) -> str:
        from environments.acebench import data

        return data.category_of(task_id)

    def leakage_rows(self):
        """Every item is dev or test (ACEBench has no train split): its question and, for a normal item,
        its gold calls; an agent multi-turn item's question is the simulated user's instruction."""
        from environments.acebench import data
        from environments.acebench.benchmark import scored_categories, split_of
        from base.environment import GoldRow
        from sandbox.leakage import call_key

        for category in (*scored_categories(), *data.NEEDS_USER):
            for tid, item in sorted(data.items(category).items()):
                calls = tuple(call_key(n, a) for n, a in gold_calls(data.answer(tid)["ground_truth"], item["function"])) if category.startswith("normal") else ()
                yield GoldRow(split_of(tid), tid, [item["question"]] if isinstance(item.get("question"), str) else [],
                              calls, False)

    def leakage_key(self) -> bytes:
        from environments.acebench import data

        return Path(__file__).read_bytes() + (data.root() / "SOURCE.json").read_bytes()

    def checker_rules(self) -> tuple:
        return CHECKER_RULES


def gold_calls(answer: Any, offered: Any = ()) -> list[tuple[str, dict]]:
    """The calls of a normal item's ground truth: {name: arguments, ...} or a list of such. A function
    called twice is keyed "name_1", "name_2" there: the suffix goes when `name` is an offered function."""
    import re

    names = {f["name"] for f in offered}
    out = []
    for part in answer if isinstance(answer, list) else [answer]:
        if isinstance(part, dict):
            for name, args in part.items():
                base = re.sub(r"_\d+$", "", name)
                if isinstance(args, dict):
                    out.append((base if name not in names and base in names else name, args))
    return out
