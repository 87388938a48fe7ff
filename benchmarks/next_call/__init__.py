"""The trajectory-replay benchmark: a corpus without an environment, evaluated step by step on its
own held-out tenth (benchmark.py: tasks and step items; scoring.py: the call-by-call judge;
environment.py: the environment registered as "replay")."""
