"""Every policy's decoding budget, declared once: the defaults of `environments.evaluate.EvalSpec`
and of the policies' constructors (a module of its own, so the policies and the package that
loads them need not import each other)."""

DEFAULT_BATCH_SIZE = 32   # faster greedy decoding than 8 on 2 cores (docs/results/training.md)
DEFAULT_MAX_NEW_TOKENS = 256   # 128 cut long assistant turns and parallel gold answers, so a right long answer
# failed by construction (bench/results/decode-budget-cpu-small-2026-11-29.json)
LEGACY_MAX_NEW_TOKENS = 128
"""The budget before 2026-11-29: what a run.json or a quality cell that names none decoded with."""
DEFAULT_MAX_PROMPT_TOKENS = 4096
