"""Lineage (issue 29): a record's provenance — the raw ids, the operator and parameters that made
it, how — stamped by the toolkit and checked by the host; the outcome delta of an evaluated
candidate — the dev tasks it fixed and broke, tied to its edits and the records they added —
in `trace` and `report`; the diagnosis and both proposers read the deltas. On a tiny run: the
wild bfcl-single corpus (a slice), the offline proposer, the process sandbox; the dev
evaluations are written as files (nothing is trained)."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import jinja2
import pytest

from environments.bfcl import corpus_builder
from curation_strategies import toolkit as tk
from evolver import cli
from evolver.config import RunConfig
from evolver.lineage import outcome_deltas
from evolver.candidate import curate_candidate
from evolver.context import RunContext
from evolver.decision import decide
from evolver.diagnosis_stage import diagnose_best
from evolver.propose import propose
from evolver.results import Evaluation
from evolver.proposers.agent import AgentProposer, outcome_lines, template
from evolver.proposers.brief import Brief
from evolver.proposers.offline import OfflineProposer, with_outcomes
from evolver.proposers.operators import compose
from evolver.report import write_report
from evolver.store import RunStore
from corpora import corpus_sha256, load_corpus
from sandbox.curate import execute
from sandbox.process_executor import ProcessExecutor
from experiments.journal import event as journal_event

FIXED, BROKEN = "parallel_7", "simple_python_3"


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    raws, _, _ = corpus_builder.build("bfcl-single", "wild", 0)
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    simple = [r for r in raws if r["meta"]["env"]["variant"] == "simple_python"][:60]   # single-call items
    others = [r for r in raws if r["meta"]["env"]["variant"] != "simple_python"][:20]
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in simple + others))
    return path


def rows(path):
    return [dict(r, meta=json.loads(r["meta"])) for r in map(json.loads, path.read_text().splitlines())]


def curated(tmp_path, corpus_file, source: str, name="out"):
    execute({"strategy.py": source.encode()}, load_corpus([str(corpus_file)]), tmp_path / name,
            executor=ProcessExecutor())
    return tmp_path / name


# ------------------------------------------------------------------ record provenance


def test_a_parallel_variants_record_names_its_operator_parameters_and_raw_ids(tmp_path, corpus_file):
    out = curated(tmp_path, corpus_file, compose({"parallel_variants": {"limit": 5, "calls": 2}}))
    made = [r for r in rows(out / "sft.jsonl") if r["meta"]["provenance"][0]["op"] == "parallel_variants"]
    assert 1 <= len(made) <= 5
    raw_ids = {json.loads(line)["id"] for line in corpus_file.read_text().splitlines()}
    for r in made:
        assert r["meta"]["provenance"] == [
            {"op": "parallel_variants", "how": "synthesised", "params": {"calls": 2, "limit": 5}},
            {"op": "sft_record", "how": "kept"}]
        assert len(r["meta"]["origin"]) == 1 and r["meta"]["origin"][0] in raw_ids
    # the plain records are ρ0's, kept; the RL steps of the made ones name the maker too
    assert [{"op": "sft_record", "how": "kept"}] in [r["meta"]["provenance"] for r in rows(out / "sft.jsonl")]
    steps = [r["meta"]["provenance"] for r in rows(out / "rl.jsonl") if r["meta"]["provenance"][0]["op"] == "parallel_variants"]
    assert steps and all(s[-1] == {"op": "rl_record", "how": "truncated"} for s in steps)
    profile = json.loads((out / "profile.json").read_text())
    assert profile["provenance"]["sft"]["parallel_variants"] == len(made)


FORGES = '''
def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    honest, edited, copied = (tk.sft_record(r, tags=["x"]) for r in raw[:3])
    edited["messages"][0]["content"] += " (edited after the toolkit)"
    copied["meta"]["provenance"] = dict(honest["meta"]["provenance"])   # another record's stamp
    hand = {"id": "hand-made", "messages": raw[3]["messages"], "tools": raw[3]["tools"],
            "meta": {"origin": [raw[3]["id"]], "provenance": {"steps": [{"op": "parallel_variants", "how": "synthesised"}]}}}
    out.sft = [honest, edited, copied, hand]
    return out
'''


def test_a_record_changed_after_its_stamp_or_stamped_by_hand_is_marked_custom(tmp_path, corpus_file):
    honest, edited, copied, hand = rows(curated(tmp_path, corpus_file, FORGES) / "sft.jsonl")
    kept, custom = {"op": "sft_record", "how": "kept"}, {"op": "custom", "how": "custom"}
    assert honest["meta"]["provenance"] == [kept]
    assert edited["meta"]["provenance"] == [kept, custom]     # the claim stays, followed by what happened
    assert copied["meta"]["provenance"] == [kept, custom]
    assert hand["meta"]["provenance"] == [custom]             # no digest: nothing it claims is taken


def test_a_masked_and_segmented_record_names_both_operators_in_order():
    raw = {"id": "t", "tools": [], "messages": [{"role": "user", "content": "go"}] + [
        m for i in range(6) for m in ({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "Error: no" if i == 1 else "ok"})]}
    weights = tk.refinement_weights(raw, mask_uncorrected=True)
    segments = tk.segment(raw, weights, max_turns=2, context_turns=1)
    assert len(segments) > 1
    record = tk.sft_record(raw, segments[0].weights, messages=segments[0].messages)
    assert tk.steps_of(record) == [
        {"op": "refinement_weights", "how": "masked", "params": {"mask_uncorrected": True}},
        {"op": "segment", "how": "segmented", "params": {"context_turns": 1, "max_turns": 2}}]


# ------------------------------------------------------------------ outcome deltas on a tiny run


def trajectory(task: str, success: bool, error_type: str = "") -> dict:
    tool = {"type": "function", "function": {"name": "calc_" + task.split("_")[0], "parameters": {}}}
    return {"id": task, "tools": [tool], "messages": [{"role": "user", "content": task}, {"role": "assistant", "content": "x"}],
            "outcome": {"success": success, "reward": float(success)},
            "meta": {"task_id": task, "category": task.rsplit("_", 1)[0], "feedback": {"error_type": error_type}}}


def evaluated(store: RunStore, epoch: int, outcomes: dict) -> None:
    folder = store.epoch_dir(epoch) / "eval-s0"
    folder.mkdir(parents=True)
    (folder / "trajectories.jsonl").write_text("".join(json.dumps(trajectory(*o)) + "\n" for o in outcomes))


@pytest.fixture(scope="module")
def run(tmp_path_factory, corpus_file):
    """ρ0, then the offline proposer's candidate for a diagnosed wrong call count (parallel_variants
    first), which fixes the parallel task and breaks the simple one."""
    root = tmp_path_factory.mktemp("lineage")
    corpus = (str(corpus_file),)
    config = RunConfig(corpus=corpus, corpus_sha256=corpus_sha256(list(corpus)), profile="test", base="tiny-random",
                       sandbox="process", tasks=2, epochs=3, proposer="offline")
    store = RunStore.create(root / "run", config.to_json())
    ep = RunContext(store)
    curation = ep.stage(0, "curate", lambda: curate_candidate(ep, 0))
    evaluated(store, 0, [(FIXED, False, "ast_checker:wrong_count"), (BROKEN, True)])
    ep.stage(0, "decide", lambda: decide(ep, 0, curation, [Evaluation(P=0.5)], []))
    ep.stage(0, "diagnose", lambda: diagnose_best(ep, 0))
    proposal = ep.stage(0, "propose", lambda: propose(ep, 0))
    curation = ep.stage(1, "curate", lambda: curate_candidate(ep, 1))
    evaluated(store, 1, [(FIXED, True), (BROKEN, False, "ast_checker:wrong_func_name")])
    decision = ep.stage(1, "decide", lambda: decide(ep, 1, curation, [Evaluation(P=1.0)], proposal.edits))
    assert decision.accepted, decision
    ep.stage(1, "diagnose", lambda: diagnose_best(ep, 1))
    return store, proposal.edits


def test_a_candidate_that_fixes_one_task_and_breaks_another_shows_both_linked_to_its_operators(run):
    store, edits = run
    assert any(e.startswith("+parallel_variants(") for e in edits)
    [delta] = outcome_deltas(store, [0])
    assert delta["epoch"] == 1 and delta["parent"] == 0 and delta["edits"] == edits
    [fixed], [broken] = delta["fixed"], delta["broken"]
    assert (fixed["task"], fixed["family_before"], fixed["family_after"]) == (FIXED, "wrong_call_count", None)
    assert (broken["task"], broken["family_before"], broken["family_after"]) == (BROKEN, None, "wrong_tool")
    assert delta["records"]["added"]["parallel_variants"] > 0
    near = fixed["near"]["added"]["parallel_variants"]   # parallel items share the task's category
    assert near["count"] > 0 and all(i.startswith(("sft:", "rl:")) for i in near["ids"])
    page = write_report(store.root).read_text()
    table = page[page.index("Outcomes per edit"):]
    table = table[:table.index("</table>")]
    assert FIXED in table and BROKEN in table and "parallel_variants +" in table
    assert all(e.replace("'", "&#x27;") in table for e in edits)
    # the epoch table is a table (not a text block), its notes said once; the strategy diff is coloured
    assert '<table class="epochs"><tr><th>epoch</th><th>P</th>' in page and "Cost_train     SFT/RL/mem" not in page
    assert '<table class="stages"><tr><th>epoch</th><th>stage</th><th>time</th>' in page and "<pre>epoch" not in page
    from evolver.tables import log_table

    notes = log_table(store)[2]
    assert all(page.count(html.escape(note)) == 1 for note in notes)
    # what each epoch's strategy held in the sandbox, beside the cap (execution.json's reported peak)
    [memory] = [n for n in notes if n.startswith("sandbox memory (the strategy's peak, of a 8.0 GiB cap): ")]
    assert re.search(r"epoch 0 \d+ MiB, epoch 1 \d+ MiB$", memory)
    assert '<pre class="diff">' in page and '<span class="add">+' in page
    assert " on ." not in page   # a motive that names no task prints no empty task list


def test_a_repeated_copy_names_the_operator_that_repeated_it():
    from evolver.proposers.operators import OPERATORS

    raw = {"id": "t", "tools": [], "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}]}
    copy = tk.repeated(tk.sft_record(raw, id="t#focus1"), "repeat_focus", 1)
    assert tk.steps_of(copy)[-1] == {"op": "repeat_focus", "how": "repeated", "params": {"copy": 1}}
    code = {o.name: "".join(o.code.values()) for o in OPERATORS}
    assert 'tk.repeated(' in code["repeat_focus"] and '"repeat_focus", i)' in code["repeat_focus"]
    assert '"repeat_no_call", i)' in code["repeat_no_call"] and 'tk.repeated(r, "rl_focus", c)' in code["rl_focus"]


def test_trace_prints_a_records_chain_and_a_tasks_outcome_per_epoch(run, capsys):
    store, edits = run
    rid = next(r["id"] for r in rows(store.epoch_dir(1) / "artifacts" / "sft.jsonl")
               if r["meta"]["provenance"][0]["op"] == "parallel_variants")
    assert cli.main(["trace", str(store.root), "--record", rid]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"sft:{rid}" and out[1].startswith("  raw: bfcl")
    assert out[2].startswith("  made by: parallel_variants(calls=") and out[2].endswith("synthesised → sft_record() kept")
    assert out[3].startswith("  epoch 1: strategy ") and "accepted" in out[3]
    assert cli.main(["trace", str(store.root), "--task", FIXED]) == 0
    out = capsys.readouterr().out
    assert "epoch 0 (accepted, P = 0.5000): seed 0: fail (wrong_call_count)" in out
    assert "epoch 1 (accepted, P = 1.0000): seed 0: pass" in out
    assert f"fixed against epoch 0 (seed 0: wrong_call_count → pass) by edits: {'; '.join(edits)}" in out
    assert re.search(r"\n    added \d+ record\(s\) by parallel_variants near it: (sft|rl):", out)
    assert cli.main(["trace", str(store.root), "--task", "no_such_task"]) == 2
    said = capsys.readouterr().err
    assert "has a dev task 'no_such_task'" in said and f"its dev tasks: {FIXED}, {BROKEN}" in said.replace("\n", " ")


def test_trace_takes_the_task_id_the_corpus_published_and_traces_each_of_its_records(run, tmp_path, capsys):
    """A next-call run's held-out records name the task they were published with (tau-bench `7`):
    `trace --task 7` traces each record of it; an unknown one lists the ids with their tasks."""
    import shutil

    store, _ = run
    copy = tmp_path / "run"
    shutil.copytree(store.root, copy)
    for path in copy.glob("epochs/*/eval-s0/trajectories.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for t in rows:
            t["meta"]["published_task_id"] = "7" if t["meta"]["task_id"] == FIXED else "8"
        path.write_text("".join(json.dumps(t) + "\n" for t in rows))
    assert cli.main(["trace", str(copy), "--task", "7"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"task 7 as its corpus published it: 1 held-out record(s), {FIXED}"
    assert out[1] == f"record {FIXED}:" and out[2] == "  epoch 0 (accepted, P = 0.5000): seed 0: fail (wrong_call_count)"
    assert cli.main(["trace", str(copy), "--task", "9"]) == 2
    assert f"its dev tasks: {FIXED} (task 7), {BROKEN} (task 8)" in capsys.readouterr().err.replace("\n", " ")


def test_the_diagnosis_and_both_proposers_read_what_the_last_edit_broke(run):
    store, edits = run
    diag = store.epoch_dir(1) / "diagnosis"
    points = json.loads((diag / "failed_points.json").read_text())
    point = next(p for p in points if BROKEN in p["task_ids"])
    assert point["broken_by"] == {"epoch": 1, "edits": edits, "task_ids": [BROKEN]}
    outcomes = json.loads((diag / "outcomes.json").read_text())
    assert [o["epoch"] for o in outcomes] == [1] and outcomes[0]["broken"][0]["task"] == BROKEN
    # offline: the broken task is a motive, its category's data repeated back
    signals = with_outcomes(json.loads((diag / "signals.json").read_text()), outcomes)
    assert signals["broken"] == [BROKEN]
    ep = RunContext(store)
    files = ep.ws.files("best")
    first = next(OfflineProposer().effectiveness(files, points, signals, known=None))
    assert "broke 1 dev task(s)" in first.message and BROKEN in first.message
    # the code agent: the same deltas in its prompt
    brief = Brief(files=files, failed_points=points, signals=signals, curation_stats={}, lam=0.3, rejected_edits=[],
                  history=[], corpus=None, seed=0, outcomes=outcomes)
    variables = AgentProposer.variables("effectiveness", brief, None)
    assert variables["outcomes"] == outcome_lines(outcomes)
    prompt = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(template("evolve_instance.jinja")).render(**variables)
    assert f"fixed {FIXED} (wrong_call_count → pass)" in prompt and f"broke {BROKEN} (pass → wrong_tool)" in prompt


def test_lineage_never_changes_what_a_training_or_cell_is_keyed_by(tmp_path):
    from experiments.quality.cells import consumed_sha256
    from base.files import sha256_file
    from base.schemas import canonical_json

    def write(name, metas):
        path = tmp_path / name
        path.write_text("".join(canonical_json({"id": f"r{i}", "messages": [], "meta": canonical_json(m)}) + "\n"
                                for i, m in enumerate(metas)))
        return path

    plain = write("plain.jsonl", [{"origin": ["a"]}, {"origin": ["b"]}])
    stamped = write("stamped.jsonl", [{"origin": ["a"], "provenance": [{"op": "keep", "how": "kept"}]},
                                      {"origin": ["b"], "provenance": [{"op": "custom", "how": "custom"}]}])
    other = write("other.jsonl", [{"origin": ["a"]}, {"origin": ["c"]}])
    assert consumed_sha256(plain) == sha256_file(plain)   # a file without provenance: its bytes' hash
    assert consumed_sha256(stamped) == consumed_sha256(plain) != sha256_file(stamped)
    assert consumed_sha256(other) != consumed_sha256(plain)


# ------------------------------------------------------------------ what an edit removed, and by which operator


def _own_corpus(path):
    """Six trajectories of our own: two failed tool calls, two replies without a call, two good calls."""
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

    def called(i, city, success):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": city})}}
        return {"id": f"own-{i}", "tools": tools, "success": success, "messages": [
            {"role": "user", "content": f"What is the weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"{city}: 18 C, dry"},
            {"role": "assistant", "content": f"It is 18 C and dry in {city}."}]}

    def replied(i, text):
        return {"id": f"own-{i}", "tools": tools, "messages": [{"role": "user", "content": text},
                                                               {"role": "assistant", "content": "Hello!"}]}

    records = [called(0, "Oslo", False), replied(1, "Say hello to the owls of Tromsø for me"), called(2, "Lima", True),
               called(3, "Pune", False), replied(4, "Wish my cactus a good morning"), called(5, "Kyiv", True)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_removed_record_is_counted_under_the_operator_that_dropped_it(tmp_path, capsys):
    from evolver.lineage import record_changes
    from evolver.trace import outcome_table

    corpus = (str(_own_corpus(tmp_path / "own.jsonl")),)
    config = RunConfig(corpus=corpus, corpus_sha256=corpus_sha256(list(corpus)), profile="test", base="tiny-random",
                       sandbox="process", tasks=2, epochs=2, proposer="offline")
    store = RunStore.create(tmp_path / "run", config.to_json())
    edits = ["+drop_failed()", "+with_tool_calls()", "+fit_budget(passes='once')"]
    child = {"drop_failed": {}, "with_tool_calls": {}, "fit_budget": {"passes": "once"}}
    for epoch, genome in ((0, {}), (1, child)):
        execute({"strategy.py": compose(genome).encode()}, load_corpus(list(corpus)),
                store.epoch_dir(epoch) / "artifacts", executor=ProcessExecutor(), budget={"sft_examples": 1})
        store.journal.append(journal_event({"event": "stage_done", "epoch": epoch, "stage": "decide", "result": {
            "epoch": epoch, "P": 0.5, "C": 0.2, "J": 0.44, "accepted": True, "edits": edits if epoch else []}}))
    notes = [json.loads(line) for line in (store.epoch_dir(1) / "artifacts" / "dropped.jsonl").read_text().splitlines()]
    assert {(n["kind"], n["id"], n["op"]) for n in notes} == {
        ("raw", "own-0", "drop_failed"), ("raw", "own-3", "drop_failed"), ("raw", "own-1", "with_tool_calls"),
        ("raw", "own-4", "with_tool_calls"), ("sft", "own-5", "fit_budget")}
    assert not (store.epoch_dir(0) / "artifacts" / "dropped.jsonl").exists()   # ρ0 drops nothing: its bytes as before

    _, removed, _ = record_changes(store.epoch_dir(0) / "artifacts", store.epoch_dir(1) / "artifacts")
    by = {f"{r['kind']}:{r['id']}": r["by"] for r in removed}
    assert by == {"sft:own-0": "drop_failed", "rl:own-0#step1": "drop_failed", "sft:own-3": "drop_failed",
                  "rl:own-3#step1": "drop_failed", "sft:own-1": "with_tool_calls", "sft:own-4": "with_tool_calls",
                  "sft:own-5": "fit_budget"}   # not the sft_record / rl_record that had made them
    table = outcome_table(store)
    assert "<th>removed (by)</th>" in table
    assert "drop_failed −4<br>with_tool_calls −2<br>fit_budget −1" in table and "made by" not in table.split("</p>")[1]
    assert cli.main(["trace", str(store.root), "--record", "own-3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "sft:own-3" in out and "rl:own-3#step1" in out and out[-1].startswith("epoch 1: strategy ")
    assert out[-1].endswith(" dropped the raw trajectory own-3 (drop_failed)")
    # a removal no operator noted (a strategy's own code) is counted under the operator that had made it
    (store.epoch_dir(1) / "artifacts" / "dropped.jsonl").unlink()
    _, removed, _ = record_changes(store.epoch_dir(0) / "artifacts", store.epoch_dir(1) / "artifacts")
    assert {r["by"] for r in removed} == {"made by sft_record", "made by rl_record"}


def test_trace_says_which_sft_records_the_training_budget_reached(tmp_path, capsys):
    corpus = (str(_own_corpus(tmp_path / "own.jsonl")),)
    config = RunConfig(corpus=corpus, corpus_sha256=corpus_sha256(list(corpus)), profile="test", base="tiny-random",
                       sandbox="process", tasks=2, epochs=1, proposer="offline")
    store = RunStore.create(tmp_path / "run", config.to_json())
    execute({"strategy.py": compose({}).encode()}, load_corpus(list(corpus)), store.epoch_dir(0) / "artifacts",
            executor=ProcessExecutor())
    lines = [json.loads(line)["id"] for line in (store.epoch_dir(0) / "artifacts" / "sft.jsonl").read_text().splitlines()]
    store.journal.append(journal_event({"event": "stage_done", "epoch": 0, "stage": "train-s0", "result": {
        "adapter": None, "trained": {"sft": len(lines), "rl": 0},
        "summary": {"sft": {"records_reached": [1], "epochs_seen": 0.167}}}}))
    store.journal.append(journal_event({"event": "stage_done", "epoch": 0, "stage": "decide", "result": {
        "epoch": 0, "P": 0.5, "C": 0.2, "J": 0.44, "accepted": True, "edits": []}}))
    for line, expected in ((1, "trained (seed 0)"),
                           (0, "not reached by the training budget (seed 0: it saw 0.167× of the SFT set)")):
        assert cli.main(["trace", str(store.root), "--record", f"sft:{lines[line]}"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[3].startswith("  epoch 0: strategy ") and expected in out[3] and "trained (seed 0); " not in out[3], out


def test_the_run_epochs_file_lists_each_epoch_with_its_decision_edits_and_what_it_fixed(run, tmp_path):
    """bench/run_epochs.py: the run's epochs as the leaderboard's `run` kind, read from its files."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_epochs", Path(__file__).parents[1] / "bench" / "run_epochs.py")
    run_epochs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_epochs)
    store, edits = run
    out = tmp_path / "epochs.json"
    assert run_epochs.main([str(store.root), "--command", "curateevo run", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    first, second = doc["epochs"]
    assert (first["epoch"], first["accepted"], first["decision"]) == (0, True, "first best")
    assert second["epoch"] == 1 and second["accepted"] is True and second["edits"] == edits
    assert (second["fixed"], second["broken"], second["parent"]) == ([FIXED], [BROKEN], 0)
    assert doc["accepted_revisions"] == 1 and doc["kind"] == "run" and "wall_s" in doc
    assert doc["final"] is None   # the run has not chosen its final yet: nothing is recomputed in its place
    # finished: the final the run recorded, its rule and why, not one recomputed by another rule
    import shutil

    from evolver.loop import final

    shutil.copytree(store.root, tmp_path / "finished")
    finished = RunContext(RunStore.open(tmp_path / "finished"))
    chosen = finished.stage(-1, "final", lambda: final(finished))
    assert run_epochs.main([str(tmp_path / "finished"), "--command", "curateevo run", "--out", str(out)]) == 0
    recorded = json.loads(out.read_text())["final"]
    assert recorded == {"epoch": chosen.epoch, "commit": chosen.commit, "P": chosen.P, "accepted": True,
                        "rule": "paper-best-dev", "why": chosen.why} and chosen.epoch == 1
    assert [(r["epoch"], r["fixed"], r["broken"]) for r in doc["table"]] == [(0, 0, 0), (1, 1, 1)]
    assert run_epochs.main([str(tmp_path), "--command", "x", "--out", str(tmp_path / "no.json")]) == 2
    assert not (tmp_path / "no.json").exists()
