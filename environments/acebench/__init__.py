"""ACEBench (English): the shipped data, a checker with the official rules, and (where it runs) the agent multi-step scorer."""
