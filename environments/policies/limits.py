"""Every policy's decoding budget, declared once: the defaults of `environments.evaluate.EvalSpec`
and of the policies' constructors (a module of its own, so the policies and the package that
loads them need not import each other)."""

DEFAULT_BATCH_SIZE = 32   # measured: greedy decoding of 60 dev tasks 1.8× faster than 8 on 2 cores
DEFAULT_MAX_NEW_TOKENS = 256   # measured (bench/decode_budget.py, 2026-11-29): 128 cut 46 of the default corpus's 280
# assistant turns and 23 of the tuning slice's 48 parallel gold answers, so a right long answer failed by construction
LEGACY_MAX_NEW_TOKENS = 128
"""The budget before 2026-11-29: what a run.json or a quality cell that names none decoded with."""
DEFAULT_MAX_PROMPT_TOKENS = 4096
