"""The screen: k candidates of an epoch ranked cheaply, so the full recipe goes to the best (issue 60).

A multi-fidelity screen: successive halving (evolver.selection) over the loop's proxy
(evolver.evaluation.proxy_scores with the one proxy definition, experiments.train_eval.proxy_specs: a
short SFT on a candidate's dry-run artifacts and a small balanced dev subset, both scaled by the
rung's units, J = P − λ·C). Every candidate gets the cheapest rung, the better half twice the
units, until one remains.

Each scored (candidate, units) cell is kept as `<folder>/<key>.json` (the propose stage's
`epochs/<e>/screen/`), keyed by the candidate's artifact hashes, the units and the proxy's
specs, as soon as it is scored. A run killed mid-screen resumes with the cells it has and scores
only the rest, so it reaches the choice the uninterrupted run reaches (the proxy is deterministic
given its inputs; tests/test_screen.py kills one); a rung that asks for a cell an earlier rung
scored (the same units) reads it. On the local backend a rung's missing cells are scored one at a
time, so each lands when done; on a cluster they are submitted together.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

from base.files import atomic_json, read_json
from experiments.train_eval import PROXY_ABLATION, proxy_specs
from evolver import evaluation
from evolver.candidate import artifact_hashes
from evolver.context import RunContext
from evolver.selection import Selection, select


def proxy_setting(cfg, units: int) -> dict:
    """What a proxy cell's score depends on besides the candidate's artifacts: the proxy's specs at
    `units` (experiments.train_eval.proxy_specs, as evolver.evaluation.proxy_scores trains and evaluates
    with them, less how the training child is launched and tracked), the seed, λ and the ablations."""
    train, evaluation_spec = proxy_specs(cfg.train, cfg.eval_spec, units, cfg.proxy_sft_steps, cfg.proxy_tasks)
    return {"train": train.model_dump(mode="json", exclude={"report_to", "launcher", "accelerate_config"}),
            "evaluate": evaluation_spec.model_dump(mode="json", exclude={"corpus"}), "corpus": cfg.corpus_sha256,
            "seed": cfg.seeds[0], "lam": cfg.lam, "ablations": sorted({*cfg.ablations, PROXY_ABLATION})}


def cell_key(cfg, artifacts: dict, units: int) -> str:
    blob = json.dumps({"artifacts": artifacts, "units": units, "proxy": proxy_setting(cfg, units)}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def scores(run: RunContext, dry, chains: Sequence[list], units: int, folder: Path) -> list[float]:
    """The proxy J of each chain (its last revision's dry run) at `units`: from its cell when
    scored before, else scored now and kept."""
    keys = [cell_key(run.cfg, artifact_hashes(dry.output(dry.candidate(chain[-1].files))), units) for chain in chains]
    first = {key: i for i, key in reversed(list(enumerate(keys)))}   # candidates with the same artifacts: one cell
    missing = [i for key, i in sorted(first.items(), key=lambda kv: kv[1]) if not (folder / f"{key}.json").is_file()]
    groups = [[i] for i in missing] if run.backend.name == "local" else [missing] if missing else []
    for group in groups:
        got = evaluation.proxy_scores(run, dry, [chains[i] for i in group], units)
        for i, j in zip(group, got):
            atomic_json(folder / f"{keys[i]}.json", {"key": keys[i], "units": units, "J": float(j),
                                                     "edits": [e for o in chains[i] for e in o.edits]})
    return [float(read_json(folder / f"{key}.json")["J"]) for key in keys]


def screen(chains: Sequence[list], budget: int, *, folder: Path, run: RunContext, dry) -> Selection:
    """Successive halving over `chains` on the kept proxy cells (`scores`); the chosen chain and every rung."""
    folder.mkdir(parents=True, exist_ok=True)
    return select(list(chains), budget=budget, proxy_scores=lambda group, units: scores(run, dry, group, units, folder))
