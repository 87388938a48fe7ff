"""Epoch 0's candidate: the seed ρ0, or a user's own strategy (`curateevo run --strategy DIR`).

A user's strategy is read (`sandbox.strategy_files`: a directory, or its strategy.py), given ρ0's
inputs/ (the run's params, no diagnosis yet) and checked as the loop checks any candidate before it
commits it (evolver.launch.check_own_strategy through evolver.candidate.check_candidate: the host's
file check, a dry run on the whole corpus as the strategy sees it in the sandbox, the host checker on
its output, something curated) — all when the run is created, before anything is trained; a failure
is one sentence and no run. The files are then committed as the workspace's `epoch-0` (and `best`), and run.json records the
directory and the files' sha256, so resume and replay read the strategy from the run alone.
"""
from __future__ import annotations

from pathlib import Path

from base.errors import UserError
from base.files import sha256_files
from evolver.config import RunConfig
from sandbox.executor import PROJECT_ROOT
from sandbox.strategy_files import check_files, inputs_files, strategy_files
from workspace.repository import Workspace

SEED_STRATEGY = PROJECT_ROOT / "curation_strategies" / "seed"
EMPTY_DIAGNOSIS = {"failed_points": [], "signals": {"families": {}, "forgetting": [], "boundary": [], "rare": []},
                   "profile": {}, "rejected": []}
"""ρ0's inputs: no diagnosis yet, but every file a strategy may read is there."""


def epoch0_files(cfg: RunConfig) -> dict[str, bytes]:
    """The files epoch 0's commit holds: the strategy's (the user's, else the seed's) with ρ0's inputs/."""
    own = {k: v for k, v in strategy_files(cfg.strategy or SEED_STRATEGY).items() if not k.startswith("inputs/")}
    return {**own, **inputs_files({**EMPTY_DIAGNOSIS, "params.json": cfg.params()})}


def create_workspace(path: Path, cfg: RunConfig) -> Workspace:
    """The run's strategy workspace at `path`, epoch 0's candidate committed: the seed ρ0, or the
    user's strategy as run.json recorded it (UserError when that directory changed since)."""
    if not cfg.strategy:
        return Workspace.create(path, SEED_STRATEGY, params=cfg.params(), inputs=EMPTY_DIAGNOSIS)
    if own_sha256(cfg.strategy) != cfg.strategy_sha256:
        raise UserError(f"--strategy {cfg.strategy}: its files changed since the run was created, and the run's "
                        "workspace was never made from them; start a new run")
    return Workspace.create(path, cfg.strategy, params=cfg.params(), inputs=EMPTY_DIAGNOSIS,
                            message=f"ρ0: the user's strategy from {cfg.strategy}")


def own_sha256(directory: str) -> str:
    """sha256 of a strategy directory's own files (inputs/ aside: the run gives its own)."""
    return sha256_files({k: v for k, v in strategy_files(directory).items() if not k.startswith("inputs/")})


def own_files(cfg: RunConfig) -> dict[str, bytes]:
    """Epoch 0's files as the host's file check accepts them; UserError naming --strategy DIR and why not
    (no such directory, no strategy.py, a file the check refuses)."""
    try:
        return check_files(epoch0_files(cfg))
    except UserError as exc:
        raise UserError(f"--strategy {cfg.strategy}: {exc}") from None
