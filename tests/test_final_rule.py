"""The run ends on the strategy its log says it kept: under `accepted-best` (a new run's default)
the final is the accepted lineage's head unless the run's acceptance rule, asked again, accepts a
rejected epoch against that head; `paper-best-dev` (the paper's best dev P) stays by name, and a
run.json made before the setting existed reads as it, so its resume chooses as it did."""

from evolver.acceptance import Margin, PairedBootstrap, Scores
from evolver.config import RunConfig, resolve
from evolver.final_rules import FINAL_RULES, PAPER
from evolver.results import Decision
from evolver.store import RunStore
from evolver.tables import final_line
from experiments.journal import event as journal_event


def _decision(epoch, accepted, P, C=0.5):
    return Decision(epoch=epoch, commit=f"c{epoch}" * 5, accepted=accepted, P=P, C=C, J=P - 0.1 * C,
                    reason="accepted" if accepted else "rolled back")


def _judge(rule, head, per_task, lam=0.1):
    scores = lambda d: Scores(d.P, d.C, d.P - lam * d.C, per_task[d.epoch])   # noqa: E731
    return lambda d: rule.decide(scores(d), scores(head), lam)


def _tasks(solved, n=40):
    return {f"t{i}": [1.0 if i < solved else 0.0] for i in range(n)}


# ρ0 accepted (12 of 40 solved), epoch 1 accepted (14), epoch 2 rolled back on a 2-task difference (16)
EPOCHS = [_decision(0, True, 0.30), _decision(1, True, 0.35), _decision(2, False, 0.40)]
PER_TASK = {0: _tasks(12), 1: _tasks(14), 2: _tasks(16)}


def test_a_rejected_epoch_within_the_margin_is_not_the_final_under_accepted_best():
    head = EPOCHS[1]
    chosen, why = FINAL_RULES["accepted-best"](EPOCHS, head, _judge(Margin(0.06), head, PER_TASK))
    assert chosen.epoch == 1 and "head of the accepted lineage" in why
    paper, why = FINAL_RULES["paper-best-dev"](EPOCHS, head, _judge(Margin(0.06), head, PER_TASK))
    assert paper.epoch == 2 and why == PAPER   # the paper's rule picks what the acceptance refused


def test_a_rejected_epoch_the_rule_accepts_against_the_head_is_the_final():
    per_task = {**PER_TASK, 2: _tasks(30)}   # far beyond the bootstrap's noise on 40 tasks
    head = EPOCHS[1]
    chosen, why = FINAL_RULES["accepted-best"](EPOCHS, head, _judge(PairedBootstrap(), head, per_task))
    assert chosen.epoch == 2 and "beats the head of the accepted lineage (epoch 1)" in why and "paired over 40" in why
    narrow, _ = FINAL_RULES["accepted-best"](EPOCHS, head, _judge(PairedBootstrap(), head, PER_TASK))
    assert narrow.epoch == 1   # 2 tasks of 40: within the noise


def test_an_epoch_that_trained_nothing_is_never_chosen_over_the_head():
    chosen, _ = FINAL_RULES["accepted-best"](EPOCHS, EPOCHS[1], lambda d: None)
    assert chosen.epoch == 1


def test_a_new_run_gets_accepted_best_and_an_old_run_json_reads_as_paper_best_dev(tmp_path):
    from evolver import cli
    from evolver.run_cli import run_options

    given = run_options(cli.build_parser().parse_args(["run", "--corpus", "c.jsonl"]))
    assert resolve(given, ("c.jsonl",), "abc").final_rule == "accepted-best"
    old = {k: v for k, v in RunConfig().to_json().items() if k != "final_rule"}
    assert RunConfig.from_json(old).final_rule == "paper-best-dev"


def test_log_says_which_rule_chose_the_final_even_for_a_run_finished_before_the_rules_had_names(tmp_path):
    store = RunStore.create(tmp_path / "run", RunConfig().to_json())
    store.journal.append(journal_event({"event": "stage_done", "epoch": -1, "stage": "final",
                          "result": {"epoch": 2, "commit": "abcdef123456", "P": 0.4, "C": 0.5}}))
    assert final_line(store) == ("final strategy: epoch 2 (abcdef1234), P = 0.4000, C = 0.5000; chosen by the final "
                                 f"rule paper-best-dev: {PAPER}, the only rule when this run finished")
    store.journal.append(journal_event({"event": "stage_done", "epoch": -1, "stage": "final",
                          "result": {"epoch": 1, "commit": "0123456789ab", "P": 0.35, "C": 0.5,
                                     "rule": "accepted-best", "why": "the head of the accepted lineage (the best tag)"}}))
    assert final_line(store).endswith("chosen by the final rule accepted-best: the head of the accepted lineage "
                                      "(the best tag)")
