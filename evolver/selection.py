"""Successive halving over an epoch's candidates (Jamieson & Talwalkar 2016): several
revisions are scored by a cheap proxy, the better half goes on with twice the budget per
candidate, until one remains; only that one goes through the full recipe.

`proxy_score(candidate, units)` is the caller's (or `proxy_scores(candidates, units)`, one rung's
survivors scored together, e.g. submitted at once to a cluster): for the loop, a short SFT on a subset of the
candidate's records and a small dev subset, `units` scaling both (more units, a longer and more
faithful proxy); higher is better. `budget` is the total of units over all rungs. Ties keep the
proposer's order (its best guess first), so the selection is deterministic for a deterministic
proxy. With one candidate the proxy is never called: k = 1 is the one-candidate loop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

C = TypeVar("C")


@dataclass
class Selection:
    best: object
    index: int                                     # the winner's position among the candidates
    rungs: list[dict] = field(default_factory=list)  # per rung: units each, {index: score}, survivors
    units_spent: int = 0


def select(candidates: Sequence[C], proxy_score: Callable[[C, int], float] | None = None, budget: int = 0, *,
           proxy_scores: Callable[[list[C], int], Sequence[float]] | None = None) -> Selection:
    """The candidate successive halving keeps, with the record of every rung."""
    if proxy_scores is None:
        proxy_scores = lambda group, units: [proxy_score(c, units) for c in group]   # noqa: E731
    if not candidates:
        raise ValueError("no candidates to select from")
    if len(candidates) == 1:
        return Selection(candidates[0], 0)
    rounds = math.ceil(math.log2(len(candidates)))
    alive = list(range(len(candidates)))
    selection = Selection(None, -1)
    for _ in range(rounds):
        units = budget // (len(alive) * rounds)
        if units < 1:
            raise ValueError(f"a proxy budget of {budget} units cannot score {len(alive)} candidates over "
                             f"{rounds} rungs; give at least {len(alive) * rounds}")
        scores = dict(zip(alive, map(float, proxy_scores([candidates[i] for i in alive], units))))
        selection.units_spent += units * len(alive)
        keep = max(1, math.ceil(len(alive) / 2))
        alive = sorted(sorted(alive, key=lambda i: (-scores[i], i))[:keep])
        selection.rungs.append({"units": units, "scores": scores, "survivors": list(alive)})
        if len(alive) == 1:
            break
    selection.index = alive[0]
    selection.best = candidates[alive[0]]
    return selection
