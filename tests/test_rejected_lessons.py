"""Rolled-back candidates teach (issue 28, item 5): a rejected candidate's evaluation, read against
the best policy's (CoEvolve's forgetting: tasks the best solved that the candidate fails, and the
tasks it fixed), goes into the next epoch's `inputs/rejected.json` and brief; the offline proposer
does not add again an operator whose candidate broke more than it fixed; the code agent reads the
lessons in its brief."""
from __future__ import annotations

import json

import pytest

from evolver import cli
from evolver.diagnose import rejected_lesson
from evolver.candidate import curate_candidate
from evolver.context import RunContext
from evolver.diagnosis_stage import diagnose_best
from evolver.propose import propose
from evolver.proposers.agent import AgentProposer, template
from evolver.proposers.brief import Brief
from evolver.proposers.offline import lessons_of
from evolver.store import RunStore
from workspace.repository import Workspace

from conftest import SAMPLE_CORPUS
from test_loop_seams import new_run
from test_signals import trajectory

pytestmark = [pytest.mark.timeout(1800), pytest.mark.usefixtures("trained_once")]

BEST = {"simple_python_1": True, "simple_python_2": False, "multiple_3": True, "multiple_4": False}
CANDIDATE = {"simple_python_1": False, "simple_python_2": True, "multiple_3": False, "multiple_4": False}


def write_evaluation(ep: RunContext, epoch: int, outcomes: dict, kind: str = "eval") -> None:
    folder = ep.store.epoch_dir(epoch) / f"{kind}-s0"
    folder.mkdir(parents=True)
    (folder / "trajectories.jsonl").write_text("".join(json.dumps(trajectory(t, ok, ["f"] if ok else ())) + "\n"
                                                       for t, ok in outcomes.items()))


def decided(ep: RunContext, epoch: int, accepted: bool, edits=(), P: float = 0.5) -> dict:
    curation = ep.stage(epoch, "curate", lambda: curate_candidate(ep, epoch))
    return ep.store.stage(epoch, "decide", lambda: {"epoch": epoch, "accepted": accepted, "P": P, "C": curation.C,
                                                    "J": P - 0.3 * curation.C, "commit": curation.commit,
                                                    "edits": list(edits), "reason": "test"})


def test_the_lesson_is_forgetting_against_the_best_and_its_mirror():
    best = [trajectory(t, ok) for t, ok in BEST.items()]
    candidate = [trajectory(t, ok) for t, ok in CANDIDATE.items()]
    lesson = rejected_lesson(candidate, best)
    assert lesson["broke"] == ["multiple_3", "simple_python_1"] and lesson["fixed"] == ["simple_python_2"]
    assert sum(p["count"] for p in lesson["broke_as"]) == 2
    assert {t for p in lesson["broke_as"] for t in p["task_ids"]} == {"multiple_3", "simple_python_1"}
    assert rejected_lesson(best, best)["broke"] == [] and rejected_lesson(best, best)["fixed"] == []


def test_the_lesson_says_per_category_what_the_candidate_traded_and_both_proposers_read_it():
    """A candidate that fixes one category and breaks another (evo's epoch 2: irrelevance won, simple
    lost) is reported per category, in the lesson and in both proposers' texts."""
    def categorized(outcomes):
        return [{**t, "meta": {**t["meta"], "category": t["meta"]["task_id"].rsplit("_", 1)[0]}}
                for t in (trajectory(task, ok) for task, ok in outcomes.items())]

    lesson = {"epoch": 2, "edits": ["+drop_failed()"], "summary": "s", "J": 0.1, "against": {"J": 0.2},
              **rejected_lesson(categorized(CANDIDATE), categorized(BEST))}
    assert lesson["by_category"] == {"multiple": {"fixed": 0, "broke": 1}, "simple_python": {"fixed": 1, "broke": 1}}
    assert "(per category fixed/broken: multiple +0/−1, simple_python +1/−1)" in lessons_of([lesson])[2]
    from evolver.proposers.agent import _lesson_lines
    assert _lesson_lines([lesson])[0].endswith("; per category fixed/broken: multiple +0/−1, simple_python +1/−1")
    # trajectories that name no category: counted under "" and said as such
    assert rejected_lesson([trajectory(t, ok) for t, ok in CANDIDATE.items()],
                           [trajectory(t, ok) for t, ok in BEST.items()])["by_category"] == {"": {"fixed": 1, "broke": 2}}


def test_the_offline_proposer_does_not_add_again_what_broke_more_than_it_fixed():
    harmful = {"epoch": 2, "edits": ["+repeat_focus(categories=('simple_python',), times=2)", "-segment"],
               "broke": ["simple_python_1", "multiple_3"], "fixed": ["simple_python_2"]}
    helpful = {"epoch": 3, "edits": ["+drop_failed()"], "broke": ["multiple_3"], "fixed": ["a", "b"]}
    banned, broken, note = lessons_of([harmful, helpful])
    assert banned == {"repeat_focus"} and broken == {"simple_python_1", "multiple_3"}
    assert "epoch 2" in note and "repeat_focus not proposed again" in note and "epoch 3" in note
    assert lessons_of([]) == (set(), set(), "")


def test_a_rejected_epochs_lessons_are_in_the_next_epochs_inputs_and_steer_the_proposer(tmp_path):
    ep = RunContext(new_run(tmp_path, epochs=3, benchmark="bfcl-single"))
    write_evaluation(ep, 0, BEST)
    decided(ep, 0, True)
    ep.stage(0, "diagnose", lambda: diagnose_best(ep, 0))
    first = ep.stage(0, "propose", lambda: propose(ep, 0))
    assert first.candidate and first.edits
    assert json.loads(ep.ws.files("epoch-1")["inputs/rejected.json"]) == []     # nothing rolled back yet

    write_evaluation(ep, 1, CANDIDATE)
    write_evaluation(ep, 1, {"multiple_4": True, **{t: False for t in ("simple_python_1", "simple_python_2")}}, "sample")
    with open(ep.store.epoch_dir(1) / "sample-s0" / "trajectories.jsonl", "a") as f:   # multiple_4: a mixed sample
        f.write(json.dumps({**trajectory("multiple_4", False), "id": "multiple_4/s1"}) + "\n")
    decided(ep, 1, False, first.edits, P=0.25)
    diagnosis = ep.stage(1, "diagnose", lambda: diagnose_best(ep, 1))
    assert diagnosis.of_epoch == 0 and diagnosis.rejected == {"1": {"broke": 2, "fixed": 1}}
    second = ep.stage(1, "propose", lambda: propose(ep, 1))
    assert second.candidate

    files = ep.ws.files("epoch-2")
    lessons = json.loads(files["inputs/rejected.json"])
    assert lessons == json.loads((ep.store.epoch_dir(1) / "diagnosis" / "rejected.json").read_text())
    assert [x["epoch"] for x in lessons] == [1]
    lesson = lessons[0]
    assert lesson["broke"] == ["multiple_3", "simple_python_1"] and lesson["fixed"] == ["simple_python_2"]
    assert lesson["boundary"] == ["multiple_4"] and lesson["edits"] == first.edits
    assert lesson["against"]["epoch"] == 0 and lesson["P"] == 0.25
    assert lesson["summary"] == ep.ws.log("epoch-1")[0]["message"].splitlines()[0]
    # it broke more than it fixed: none of its operators is added again, and the commit says why
    added = {e[1:].split("(")[0] for e in first.edits if e.startswith("+")}
    assert added and not any(e[1:].split("(")[0] in added for e in second.edits if e.startswith("+"))
    message = "\n".join(c["message"] for c in ep.ws.log("epoch-2")[:2])
    assert "Lessons of rolled-back candidates" in message and "broke 2 dev task(s)" in message
    # replay of the candidate re-executes it with these inputs, byte for byte
    assert cli.main(["replay", str(ep.store.root), "--epoch", "2", "--sandbox", "process"]) == 0


def test_the_code_agents_brief_states_what_a_rolled_back_candidate_broke_and_fixed():
    import jinja2

    lesson = {"epoch": 1, "summary": "effectiveness: half of the clean RL steps", "edits": [], "P": 0.25, "C": 0.4,
              "J": 0.13, "against": {"epoch": 0, "P": 0.5, "C": 0.4, "J": 0.38},
              **rejected_lesson([trajectory(t, ok) for t, ok in CANDIDATE.items()],
                                [trajectory(t, ok) for t, ok in BEST.items()])}
    brief = Brief(files={}, failed_points=[], signals={}, curation_stats={}, lam=0.3, rejected_edits=[], history=[], corpus=None,
                  seed=0, rejected=[lesson])
    text = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(template("evolve_instance.jinja")).render(
        **AgentProposer.variables("effectiveness", brief, None))
    assert "inputs/rejected.json" in text and "epoch 1 — effectiveness: half of the clean RL steps" in text
    assert "broke 2 task(s) the best solves [multiple_3, simple_python_1]" in text
    assert "fixed 1 [simple_python_2]" in text and "J = 0.13 against the best's 0.38" in text
    quiet = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(template("evolve_instance.jinja")).render(
        **AgentProposer.variables("effectiveness", Brief(**{**brief.__dict__, "rejected": []}), None))
    assert "rejected.json" not in quiet


def test_a_test_profile_run_carries_a_rejected_epochs_forgetting_signals_into_the_next_inputs(tmp_path):
    """The whole loop: every candidate is rolled back (no J beats the best by 1), so epoch 1's
    evaluation against ρ0's is in epoch 2's inputs/. That a replay of epoch 2 re-executes it with
    those inputs byte for byte is the stage-level test's above (a replay here would add a third
    curation, training and evaluation to the slowest test of the module)."""
    args = ["--profile", "test", "--base", "tiny-random", "--epochs", "3", "--tasks", "2", "--sandbox", "process",
            "--benchmark", "bfcl-single", "--corpus", str(SAMPLE_CORPUS), "--margin", "1", "--batch-size", "2"]
    assert cli.main(["run", *args, "--runs-dir", str(tmp_path), "--name", "r"]) == 0
    root = tmp_path / "r"
    store = RunStore.open(root)
    decisions = {e.epoch: e.result for e in store.journal.events()
                 if e.is_done("decide")}
    assert [decisions[e]["accepted"] for e in (0, 1, 2)] == [True, False, False]
    inputs = Workspace.open(root / "strategy").files("epoch-2")["inputs/rejected.json"]
    (lesson,) = json.loads(inputs)
    assert [lesson] == json.loads((root / "epochs" / "1" / "diagnosis" / "rejected.json").read_text())
    assert lesson["epoch"] == 1 and lesson["against"]["epoch"] == 0 and lesson["P"] == decisions[1]["P"]
    assert {"broke", "fixed", "broke_as", "families", "boundary", "rare"} <= set(lesson)
    evaluated = [json.loads(line) for line in (root / "epochs" / "1" / "eval-s0" / "trajectories.jsonl").open()]
    assert len(lesson["broke"]) + len(lesson["fixed"]) <= len(evaluated)
