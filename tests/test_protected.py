"""A proposer that keeps what was won (issue 60, item 2): a setting an accepted edit introduced,
and whose fixed dev tasks a change would risk, is never retuned, removed or put back by the
offline proposer unless the diagnosis names that operator or those tasks; the code agent's brief
names the same protected settings; remedies are proposed in combination before one at a time."""
import jinja2

from evolver.proposers.agent import AgentProposer, template
from evolver.proposers.brief import Brief, Verdict
from evolver.proposers.offline import OfflineProposer
from evolver.proposers.operators import compose, read_genome
from evolver.proposers.protected import Guard, named, won_settings

# epoch 1 of evo4 in miniature: irrelevance items and called tools' signatures, accepted, fixed
# irrelevance tasks; the best strategy holds both settings
WON = {"irrelevance_items": {"k": 1, "limit": 150}, "tool_signatures": {"only_called": True},
       "fit_budget": {"passes": "recipe"}}
ACCEPTED = {"epoch": 1, "parent": 0, "accepted": True,
            "edits": ["+irrelevance_items(k=1, limit=150)", "+tool_signatures(only_called=True)",
                      "+fit_budget(passes='recipe')"],
            "fixed": [{"task": f"irrelevance_{i}", "seed": 0} for i in range(5)] + [{"task": "parallel_2", "seed": 0}],
            "broken": [{"task": "multiple_4", "seed": 0}], "records": {"added": {}, "removed": {}, "changed": {}}}
ROLLED_BACK = {"epoch": 2, "parent": 1, "accepted": False, "edits": ["+add_distractors(k=2, limit=50)"],
               "fixed": [{"task": "multiple_9", "seed": 0}], "broken": [{"task": "irrelevance_3", "seed": 0}], "records": {"added": {}, "removed": {}, "changed": {}}}
# what the best now fails: every motive whose remedies touch the won operators
POINTS = [{"failed_point": "called a function with a wrong argument value", "evidence": "type error",
           "curation_hint": "show exact argument types", "family": "bad_arguments", "count": 9,
           "task_ids": ["simple_python_3", "multiple_7"]},
          {"failed_point": "called a function where none fits", "evidence": "irrelevance_error:decoder_success",
           "curation_hint": "add requests answered without a call", "family": "unwanted_call", "count": 6,
           "task_ids": ["irrelevance_11", "irrelevance_12"]},
          {"failed_point": "one call where two were asked", "evidence": "wrong count", "curation_hint": "parallel items",
           "family": "wrong_call_count", "count": 4, "task_ids": ["parallel_5"]}]
SIGNALS = {"families": {"bad_arguments": 9, "unwanted_call": 6, "wrong_call_count": 4}, "forgetting": [], "boundary": [],
           "rare": []}
PARENT = {"strategy.py": compose(WON).encode()}


def brief(points=POINTS, signals=SIGNALS, outcomes=(ACCEPTED, ROLLED_BACK)) -> Brief:
    return Brief(files=dict(PARENT), failed_points=list(points), signals=signals, curation_stats={"cost_train": 900, "C": 0.4},
                 lam=0.3, rejected_edits=[], history=[], corpus=None, seed=0, outcomes=list(outcomes))


def every_revision(phase: str, b: Brief) -> list:
    """Every revision the proposer's stream offers for `phase` (each one passes the dry run here)."""
    return OfflineProposer().candidates(phase, b, lambda files: Verdict(True, "changed"), k=10_000)


def changed_ops(outcome) -> set[str]:
    """The operators whose setting the revision differs from the parent's in."""
    new = read_genome(outcome.files["strategy.py"].decode())
    return {op for op in set(new) | set(WON) if new.get(op) != WON.get(op)}


def test_the_won_settings_are_the_accepted_edits_the_best_still_holds():
    won = won_settings(WON, [ACCEPTED, ROLLED_BACK])
    assert set(won) == {"irrelevance_items", "tool_signatures", "fit_budget"}   # a rolled-back edit wins nothing
    assert won["irrelevance_items"].fixed == ("irrelevance_0", "irrelevance_1", "irrelevance_2", "irrelevance_3",
                                              "irrelevance_4", "parallel_2")
    # a later accepted retune replaces the protection; a setting the best no longer holds protects nothing
    later = {"epoch": 3, "accepted": True, "edits": ["+tool_signatures(only_called=False)"],
             "fixed": [{"task": "multiple_1"}], "broken": []}
    again = won_settings({**WON, "tool_signatures": {"only_called": False}}, [ACCEPTED, later])
    assert again["tool_signatures"].epoch == 3 and again["tool_signatures"].fixed == ("multiple_1",)
    assert "tool_signatures" not in won_settings({k: v for k, v in WON.items() if k != "tool_signatures"}, [ACCEPTED])
    assert won_settings(None, [ACCEPTED]) == {}   # not a composed strategy: no setting can be read
    cheaper = {**ACCEPTED, "fixed": []}   # accepted on a lower C alone: no task to lose, nothing protected
    assert won_settings(WON, [cheaper]) == {}


def test_without_a_diagnosis_naming_it_no_revision_reverses_or_retunes_an_accepted_setting():
    b = brief()
    effectiveness, efficiency = every_revision("effectiveness", b), every_revision("efficiency", b)
    assert len(effectiveness) >= 5 and len(efficiency) >= 3   # the proposer still has plenty to propose
    for outcome in effectiveness + efficiency:
        assert not changed_ops(outcome) & set(WON), (outcome.edits, changed_ops(outcome))
        assert "Accepted settings" in outcome.message and "accepted in epoch 1, fixed 6 dev task(s)" in outcome.message
    # the same brief without the lineage retunes them: the guard, not the diagnosis, kept them
    free = every_revision("effectiveness", brief(outcomes=())) + every_revision("efficiency", brief(outcomes=()))
    touched = set().union(*map(changed_ops, free))
    assert {"irrelevance_items", "tool_signatures", "fit_budget"} <= touched


def test_a_diagnosis_that_names_the_operator_or_its_tasks_releases_only_that_setting():
    by_name = [*POINTS, {"failed_point": "the tool_signatures hints name arguments the request lacks", "evidence": "…",
                         "curation_hint": "…", "family": "bad_arguments", "count": 1, "task_ids": ["simple_python_8"]}]
    released = set().union(*map(changed_ops, every_revision("effectiveness", brief(points=by_name))))
    assert "tool_signatures" in released and not released & {"irrelevance_items", "fit_budget"}
    # a won task failing again names its edit: the operators of that edit may change
    won = won_settings(WON, [ACCEPTED])
    again = [{**POINTS[1], "task_ids": ["irrelevance_2"]}]
    assert named(won, again, SIGNALS) == set(won)
    assert named(won, POINTS, {**SIGNALS, "forgetting": ["parallel_2"]}) == set(won)   # forgotten, too
    # what the accepted edit broke is a motive of its own (data added back), not a licence to undo what it won
    broken_by = [{**POINTS[0], "task_ids": ["multiple_4"],
                  "broken_by": {"epoch": 1, "edits": list(ACCEPTED["edits"]), "task_ids": ["multiple_4"]}}]
    assert named(won, broken_by, SIGNALS) == set()
    kept = every_revision("effectiveness", brief(points=[*POINTS, *broken_by], signals={**SIGNALS, "broken": ["multiple_4"]}))
    assert not set().union(*map(changed_ops, kept)) & set(WON)
    assert named(won, POINTS, SIGNALS) == set()
    assert Guard(won, frozenset({"fit_budget"})).allows("fit_budget") and not Guard(won, frozenset()).allows("fit_budget")
    assert Guard(won, frozenset()).allows("parallel_variants")


def test_remedies_are_combined_before_they_are_tried_one_at_a_time():
    revisions = every_revision("effectiveness", brief(outcomes=()))
    sizes = [len(o.edits) for o in revisions]
    assert sizes[:4] == [3, 2, 2, 2] and set(sizes[4:]) == {1}
    first = set(revisions[0].edits)
    assert all(set(o.edits) < first for o in revisions[1:4])   # each pair of the top motives' first edits


def test_the_code_agents_brief_names_the_protected_settings_and_what_they_fixed():
    variables = AgentProposer.variables("effectiveness", brief(), None)
    text = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(template("evolve_instance.jinja")).render(**variables)
    assert "What was won and must not be undone blind" in text
    line = next(line for line in text.splitlines() if line.startswith("- the edit accepted in epoch 1 ("))
    for setting in ("+irrelevance_items(k=1, limit=150)", "+tool_signatures(only_called=True)", "fit_budget(passes='recipe')"):
        assert setting in line
    assert "fixed 6 dev task(s) [irrelevance_0" in line and "do not remove or retune" in line
    assert "epoch 2" not in "\n".join(variables["won"])   # a rolled-back edit won nothing
    # an agent-written best (not composed): the accepted change and its tasks, without setting names
    agent_best = Brief(**{**brief().__dict__, "files": {"strategy.py": b"def curate(raw, ctx):\n    return None\n"}})
    lines = AgentProposer.variables("effectiveness", agent_best, None)["won"]
    assert lines and "do not undo this change unless the diagnosis names it or those tasks" in lines[0]
    quiet = AgentProposer.variables("effectiveness", brief(outcomes=()), None)
    assert quiet["won"] == [] and "What was won" not in jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(
        template("evolve_instance.jinja")).render(**quiet)
