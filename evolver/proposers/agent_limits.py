"""The code agent's limits per revision, declared once: these fields are the `--agent-*` options of
`curateevo run` and run.json's `agent` (RunConfig nests this model; evolver/config.py generates the
options from it); the proposer is given the run's `cfg.agent`."""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from evolver.options import Flag

Finite = Field(allow_inf_nan=False)


class AgentLimits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    step_limit: Annotated[int, Field(ge=1), Flag("model calls per revision", name="agent-steps", group="llm")] = 30
    """Model calls per revision, all attempts together."""
    repairs: Annotated[int, Field(ge=0), Flag("failed validations sent back to the agent per revision",
                                              name="agent-repairs", group="llm")] = 2
    """Failed validations sent back to the agent before the revision is rejected."""
    wall_time_s: Annotated[int, Field(ge=1), Flag("seconds per revision", name="agent-wall", group="llm")] = 1200
    cost_limit_usd: Annotated[float, Field(ge=0), Finite, Flag("USD per revision (0: only the run's budget)",
                                                               name="agent-usd", group="llm")] = 0.0
    """Per revision; 0: none (the run's LLM budget still applies)."""
    candidate_temperature: Annotated[float, Field(ge=0, le=2), Finite, Flag(
        "sampling temperature of the code agent's candidates 2..k with --candidates k (candidate 1 keeps the LLM's; "
        "candidate i >= 2 also sends seed = --seed + i - 1)", name="agent-temperature", group="llm")] = 0.8
    command_timeout_s: Annotated[float, Field(exclude=True)] = 120.0
    """Per command the agent runs in the sandbox; no setting of a run (not in run.json)."""
