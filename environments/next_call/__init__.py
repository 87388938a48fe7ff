"""The next-call benchmark: a corpus without an environment, scored on the agent's next call at each
recorded step of its held-out tenth (benchmark.py: tasks and step items; scoring.py: the call-by-call
judge; environment.py: the environment registered as "next-call", "replay" before issue 61)."""
