"""Environments: the benchmarks an agent is trained for and scored on, as plug-ins (bfcl/, acebench/,
tau2/, scienceworld/, next_call/), each registered in `base.registry` and declared through the seam
`base.environment`; and what every environment shares: the policies (policies/), the runner
(runner.py), `evaluate` (EvalSpec), episodes, metrics, the simulated user (user_sim.py) and the
server checks (servers.py). What the project does with them — train a curation and score it, the
quality bench — stands a floor above, in experiments/."""
