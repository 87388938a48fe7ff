"""ACEBench's agent scenarios (English), reimplemented: the phone platform classes the agent_multi_step
and agent_multi_turn items involve (`phone`; the official multi-step and multi-turn copies are
identical), and the airline desk ten agent_multi_turn items involve (`travel`)."""
