"""Proposers: what rewrites the best strategy each epoch (paper §4.2).

A proposer makes one revision per call: `revise(phase, brief, validate, out_dir) -> Outcome`,
where `phase` is "effectiveness" or "efficiency", `brief` holds the parent's files and
diagnosis, `validate(files)` is the loop's dry run of a candidate (a Verdict), and `out_dir` is
where the proposer may write its own record (agent trajectories). A proposer that can offer k
alternatives for one revision also has `candidates(phase, brief, validate, k, out_dir) ->
[Outcome]` (both do: the offline one its k best operator edits, the code agent k runs sampled
apart); the loop then ranks them with its proxy (`--candidates k`). A new proposer is one module
in this package plus one line in PROPOSERS.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from evolver.proposers.brief import Brief, Outcome, Verdict


class Proposer(Protocol):
    """What the loop calls (evolver.propose): `revise` for each phase of an epoch's chain, and
    `candidates` for the k effectiveness revisions it ranks with its proxy (`--candidates k`)."""
    name: str

    def revise(self, phase: str, brief: Brief, validate: Callable[[dict], Verdict], out_dir: Path) -> Outcome:
        """One revision of `brief.files` for `phase`, dry-run by `validate`; `out_dir`: the proposer's record."""
        ...

    def candidates(self, phase: str, brief: Brief, validate: Callable[[dict], Verdict], k: int,
                   out_dir: Path) -> list[Outcome]:
        """Up to k revisions of `brief.files` for `phase`, each dry-run by `validate`, one Outcome each."""
        ...


def _offline(config, llm, executor) -> Proposer:
    from evolver.proposers.offline import OfflineProposer

    return OfflineProposer()


def _agent(config, llm, executor) -> Proposer:
    from evolver.proposers.agent import AgentProposer

    return AgentProposer(llm, executor, config.agent)


# name → factory(run config, the run's LLM or None, the sandbox executor)
PROPOSERS: dict[str, Callable] = {"offline": _offline, "agent": _agent}


def make_proposer(name: str, config, llm, executor) -> Proposer:
    return PROPOSERS[name](config, llm, executor)


__all__ = ["Brief", "Outcome", "PROPOSERS", "Proposer", "Verdict", "make_proposer"]
