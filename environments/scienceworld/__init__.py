"""ScienceWorld (Wang et al. 2022) as the project's second environment: catalog.py (tasks and
splits), simulator.py (the Java simulator, pooled), actions.py (actions as `act` tool calls),
benchmark.py (episodes and the official score), corpus.py (train-split corpora), scenarios.py
(ctx.env's recorded train scenarios), environment.py (the `base.environment` seam)."""
