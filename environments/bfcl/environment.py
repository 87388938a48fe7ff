"""BFCL-V4 as environments (`base.environment`): multi-turn ("bfcl") and single-turn
("bfcl-single"). Both share the ctx.env scenario folder (environments/bfcl/scenarios.py), the
leakage rows of this folder (environments/bfcl/leakage.py) and the official checkers' error types;
only multi-turn rebuilds a scenario for the `state_match` reward. Everything of bfcl-eval is
imported inside the methods: importing this module is cheap.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Mapping

from environments.bfcl.single_turn_data import NO_CALL

# BFCL's official checkers' error types → the diagnosis's failure families (evolver/diagnose.py,
# rules 2–11 of its docstring); first match wins, "a|b" is chosen by the trajectory's shape.
CHECKER_RULES = (
    (r"decoder_wrong_output_format|^ast_checker:exception", "unparseable_call"),
    (r"decoder_failed", "missing_call"),
    (r"irrelevance_error:decoder_success", "unwanted_call"),
    (r"force_terminated", "step_limit|premature_stop"),
    (r"empty_turn_model_response", "empty_turn"),
    (r"instance_state_mismatch", "state_mismatch"),
    (r"execution_response_mismatch", "missing_output"),
    (r"wrong_func_name", "unknown_tool|wrong_tool"),
    (r"wrong_count", "wrong_call_count"),
    (r"missing_required|unexpected_param|missing_optional|type_error|value_error|checker:unclear|cannot_find_match",
     "bad_arguments"),
)


def category_of(task_id: str) -> str:
    """A task's category as the corpus names its environment variant: simple_python_3 →
    simple_python, multi_turn_base_12 → base."""
    return re.sub(r"^multi_turn_", "", re.sub(r"_\d+$", "", task_id))


@functools.lru_cache(maxsize=8)
def _multi_turn_tasks(category: str) -> dict:
    from environments.bfcl.backends import MULTI_TURN_CATEGORIES, load_tasks

    return load_tasks(category) if category in MULTI_TURN_CATEGORIES else {}


class _BFCL:
    metrics = ("task_success", "turn_pass", "step_accuracy")
    declining = NO_CALL   # the right answer is no call
    export_group = "bfcl"
    family_prefix = None
    corpus_settings = ("labeled", "wild")

    def build_corpus(self, out, setting: str, seed: int, **options: Any) -> dict:
        from environments.bfcl import corpus_builder

        info = corpus_builder.write(out, self.name, setting, seed, variants=options.get("categories"),
                                    limit=options.get("limit"), progress=options.get("progress"),
                                    max_records=options.get("max_records"))
        return {**info, "file": corpus_builder.CORPUS_FILE}

    def default_corpus(self, root, setting: str, seed: int, max_records: int | None):
        from environments.bfcl import corpus_builder

        return corpus_builder.cached(root, self.name, setting, seed, max_records) / corpus_builder.CORPUS_FILE

    def export_scenarios(self, named: Mapping[str, set]) -> tuple[dict, dict]:
        from environments.bfcl.scenarios import export

        return export(named)

    def leakage_key(self) -> bytes:
        from environments.bfcl import leakage

        return leakage.key()

    def checker_rules(self) -> tuple:
        return CHECKER_RULES

    def category_of(self, task_id: str) -> str:
        return category_of(task_id)

    # what each BFCL setting names: its benchmark class and its leakage rows (imported when asked for)
    benchmark_class: str = ""
    leakage_rows_of: str = ""

    def benchmark(self, **options: Any):
        import importlib

        module, name = self.benchmark_class.split(":")
        return getattr(importlib.import_module(module), name)(**options)

    def leakage_rows(self):
        from environments.bfcl import leakage

        return getattr(leakage, self.leakage_rows_of)()


class MultiTurnEnvironment(_BFCL):
    """BFCL-V4 multi-turn: stateful backends, per-turn checks, the `state_match` reward."""

    name = "bfcl"
    env_tag = "bfcl_multi_turn"
    single_step = False
    benchmark_class = "environments.bfcl.multi_turn:MultiTurnBenchmark"
    leakage_rows_of = "multi_turn_rows"

    def rebuilds(self, env: Mapping) -> bool:
        return "task_id" in env   # else state_match falls back to tool_call_match

    def reward_episode(self, env: Mapping, functions: list | None) -> Any:
        """Fresh backends of the task `env` names (KeyError when it names none)."""
        from environments.bfcl.backends import Episode

        return Episode(_multi_turn_tasks("multi_turn_" + env.get("variant", "base"))[env["task_id"]], functions=functions)

    def reward_error(self, env: Mapping) -> str | None:
        if not self.rebuilds(env):
            return None
        from base.text import printable
        from sandbox.checker import MAX_REASON_CHARS

        variant, task_id = env.get("variant", "base"), env["task_id"]

        def short(value: object) -> str:   # what the candidate wrote, as the checker quotes it
            return printable(repr(value), MAX_REASON_CHARS)

        if not isinstance(variant, str) or not _multi_turn_tasks(f"multi_turn_{variant}"):
            return f"meta.env.variant: {short(variant)} is not a BFCL multi-turn category"
        if not isinstance(task_id, str) or task_id not in _multi_turn_tasks(f"multi_turn_{variant}"):
            return f"meta.env.task_id: {short(task_id)} is not a task of BFCL multi_turn_{variant}"
        return None


class SingleTurnEnvironment(_BFCL):
    """BFCL-V4 single-turn (non-live AST categories): calls judged by the official AST checker."""

    name = "bfcl-single"
    env_tag = "bfcl_single_turn"
    single_step = True
    benchmark_class = "environments.bfcl.single_turn:SingleTurnBenchmark"
    leakage_rows_of = "single_turn_rows"
