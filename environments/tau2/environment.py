"""τ²-bench as an environment (`base.environment`), on the narrow seam: its benchmark
(environments/tau2/benchmark.py, the published package's domains and evaluator), the step items it
scores, and the prompt cap its solo-mode prompts need. It declares no optional capability: nothing
is curated from τ², which is a held-out test (or, with `--benchmark tau2`, a dev benchmark for a run
that trains on another corpus); its gold actions are never reachable from a strategy.
"""
from __future__ import annotations

from typing import Any


class Tau2Environment:
    name = "tau2"
    metrics = ("task_success", "step_accuracy")
    single_step = False
    user_simulated = True   # airline and retail run with `user` (environments/user_sim.py)
    prompt_tokens = 7680
    """The telecom solo prompt (instructions, the ~23,000-character policy, the ticket, the tools) is
    7,328–7,362 tokens in the compact chat format (SmolLM2's tokenizer): the cap that lets every task be
    seen, leaving 512 of SmolLM2-135M's 8,192 for the answer. Later steps lose their oldest turns first."""

    def benchmark(self, **options: Any):
        from environments.tau2.benchmark import Tau2Benchmark

        return Tau2Benchmark(**options)

    def category_of(self, task_id: str) -> str:
        from environments.tau2.benchmark import Tau2Benchmark

        domain, _, package_id = task_id.removeprefix("tau2-").partition("-")
        return Tau2Benchmark.category(domain, package_id)
