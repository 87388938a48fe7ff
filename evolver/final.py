"""The run's final strategy — which evaluated epoch the run ends on — by its `final_rule`
(evolver/final_rules.py FINAL_RULES, one small function each; a new rule is one function and one line):

- `accepted-best` (a new run's default): the head of the accepted lineage (the workspace's `best`
  tag), unless a rejected epoch beats it beyond the acceptance margin — the run's own acceptance
  rule, asked again with that epoch as the candidate and the head as the best, accepts it — and
  then the best of those by the paper's order. The run ends on the strategy its log says it kept.
- `paper-best-dev` (paper §4.3): the best dev P among the evaluated epochs, lower C breaking ties,
  then the earlier epoch, whatever the acceptance decided (a 2-task difference the noise-aware
  acceptance refused included). A run.json without `final_rule` (made before it existed) chose
  so: its resume and replay still do (evolver/config.py).
"""
from __future__ import annotations

from base.objective import objective
from evolver.acceptance import Ruling, Scores
from evolver.context import RunContext
from evolver.decision import trained_nothing
from evolver.final_rules import FINAL_RULES
from evolver.results import Decision, Final


def choose_final(run: RunContext) -> Final:
    """The run's final strategy by its `final_rule`, and one sentence of why (ValueError when no
    epoch was evaluated)."""
    evaluated = [d for d in run.decisions() if d.P is not None]
    if not evaluated:
        raise ValueError("no evaluated epoch to choose from")
    head = run.best()

    def scores(d: Decision) -> Scores:
        return Scores(d.P, d.C, objective(d.P, d.C, run.cfg.lam), run.per_task(d.epoch), run.task_groups(d.epoch))

    def judge(d: Decision) -> Ruling | None:
        return None if trained_nothing(run, d.epoch) else run.rule.decide(scores(d), scores(head), run.cfg.lam)

    chosen, why = FINAL_RULES[run.cfg.final_rule](evaluated, head, judge)
    return Final(epoch=chosen.epoch, commit=chosen.commit, P=chosen.P, C=chosen.C, rule=run.cfg.final_rule, why=why)
