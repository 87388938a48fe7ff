"""ACEBench's agent scenarios (English), reimplemented: the phone platform classes the 20 English
agent_multi_step items involve (`phone`). Travel is used by no English multi-step item and is not
implemented."""
