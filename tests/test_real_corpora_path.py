"""What a new user meets with published tau-bench, ToolBench and SWE-agent files (issue 32), one
point at a time, on the files as their repositories publish them (tests/fixtures/external; see
tests/test_corpus_external.py for their sources; tau-bench-airline-tools.json is the `get_info()`
of the 14 tools in sierra-research/tau-bench @ 59a200c tau_bench/envs/airline/tools/, MIT;
tau-bench-gpt-4o-airline.mixed.json is the same repository's historical_trajectories/gpt-4o-airline.json
entries 162, 194, 71, 97, 116, 1, 141 and 98 — its shortest — re-serialised with indent=2)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from evolver import cli, run_cli
from base.errors import UserError
from evolver.store import RunStore
from corpora import load_corpus
from experiments.journal import event as journal_event

pytestmark = pytest.mark.timeout(2400)   # three one-epoch runs with the tiny model; minutes under load

LOCAL = Path(__file__).resolve().parent / "fixtures" / "external"
TAU = LOCAL / "tau-bench-gpt-4o-airline.sample.json"
TAU_TOOLS = LOCAL / "tau-bench-airline-tools.json"
TAU_MIXED = LOCAL / "tau-bench-gpt-4o-airline.mixed.json"   # 8 short trajectories, 4 with reward 1
TOOLBENCH = LOCAL / "toolbench-answer"      # 4 answer files, 2 of them invalid as published
SWE_AGENT = LOCAL / "swe-agent"


def run_args(tmp_path, name, corpus, *more):
    return ["run", "--corpus", *map(str, corpus), "--profile", "test", "--base", "tiny-random", "--epochs", "1",
            "--sandbox", "process", "--runs-dir", str(tmp_path), "--name", name, *more]


def created(tmp_path, name, corpus, *more) -> RunStore:
    """A run created as `run` creates it (every check before the work), nothing run."""
    args = cli.build_parser().parse_args(run_args(tmp_path, name, corpus, *more))
    return run_cli.create_run(run_cli.run_options(args))


# ---------------------------------------------------------------- 1, 3, 8: a ToolBench folder, skipped files


@pytest.fixture(scope="module")
def toolbench_run(tmp_path_factory):
    """One epoch on the published ToolBench answer folder with --on-bad-line skip (no RL: fast), plus
    one answer file of our own: the two valid published ones are too few for a part to curate, a dev
    part and the test part `curateevo test` reads (a run on them alone is refused before any work)."""
    import shutil

    root = tmp_path_factory.mktemp("tb")
    assert cli.main(run_args(root, "refused", [TOOLBENCH], "--on-bad-line", "skip", "--ablate", "no-rl")) == 2
    assert not (root / "refused").exists()
    folder = root / "toolbench-answer"
    shutil.copytree(TOOLBENCH, folder)
    published = (TOOLBENCH / "G1_answer" / "10_ChatGPT_DFS_woFilter_w2.json").read_text()   # the one that succeeded
    ours = folder / "G9_answer" / "900_own_DFS_woFilter_w2.json"   # the same calls, asked in other words
    ours.parent.mkdir()
    ours.write_text(published.replace("Can you retrieve the contact details of the 'Gondrand' customs agency",
                                      "I need to reach the 'Gondrand' customs agency: what are the contact details"))
    (root / "test.txt").write_text(f"toolbench-answer/{ours.relative_to(folder)}\n")
    assert cli.main(run_args(root, "tb", [folder], "--on-bad-line", "skip", "--ablate", "no-rl",
                             "--test-ids", str(root / "test.txt"))) == 0
    return root / "tb"


def test_on_bad_line_skip_holds_for_evaluation_resume_and_replay(toolbench_run, capsys):
    config = json.loads((toolbench_run / "run.json").read_text())
    assert config["on_error"] == "skip"                                    # recorded in the run
    skipped = [json.loads(line) for line in (toolbench_run / "skipped.jsonl").read_text().splitlines()]
    assert [Path(s["path"]).name for s in skipped] == ["69_ChatGPT_DFS_woFilter_w2.json",
                                                       "21_ChatGPT_DFS_woFilter_w2.json"]
    evaluated = json.loads((toolbench_run / "epochs" / "0" / "eval-s0" / "metrics.json").read_text())
    assert evaluated["benchmark_config"]["skipped_lines"] == 2 and evaluated["metrics"]["step_items"] == 3
    # resume re-evaluates from the corpus (its outputs are gone) and skips the same files
    import shutil

    shutil.rmtree(toolbench_run / "epochs" / "0" / "eval-s0")
    capsys.readouterr()
    assert cli.main(["resume", str(toolbench_run)]) == 0
    assert json.loads((toolbench_run / "epochs" / "0" / "eval-s0" / "metrics.json").read_text())["P"] == evaluated["P"]
    # replay of the epoch: the folder as it was given, skipping as recorded
    assert cli.main(["replay", str(toolbench_run), "--epoch", "0", "--sandbox", "process"]) == 0
    assert "replay identical" in capsys.readouterr().out


def test_a_next_call_report_shows_categories_and_says_why_plots_are_missing(toolbench_run):
    from evolver.report import write_report

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        page = write_report(toolbench_run).read_text()
    assert not [w for w in caught if "No artists with labels" in str(w.message)]
    table = page.split("<h2>P per category (call-level F1 over the held-out steps")[1].split("</table>")[0]
    assert "toolbench" in table and "3 missed)" in table                  # the counts, not "—"
    assert "No failure-family plot: no epoch was diagnosed" in page       # one epoch: never diagnosed, and it says so
    assert "<h2>Failed trajectories</h2>" in page and "(missing_call)" in page
    assert "dev: 1 record(s) of 1 task(s) evaluated per epoch (the held-out tenth of the corpus), 3 step items (3 with a recorded call); P is call_f1 over the step items" in page
    assert "warning: the dev set holds 3 step items" in page and "wall time" in page
    assert "(call_f1, the held-out tenth of the corpus)" in page and "--tasks" not in page   # next-call has no --tasks


def test_the_toolbench_refusal_names_the_switch_that_skips(tmp_path, capsys):
    assert cli.main(["curate", "--corpus", str(TOOLBENCH), "--sandbox", "process", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "69_ChatGPT_DFS_woFilter_w2.json:1: answer_generation.train_messages: missing" in err
    assert "--on-bad-line skip (curate, run, eval)" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_curate_reports_its_wall_time_with_start_up(tmp_path, capsys):
    assert cli.main(["curate", "--corpus", str(TOOLBENCH), "--on-bad-line", "skip", "--sandbox", "process",
                     "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("artifacts in"))
    curation = float(line.split("curation ")[1].split(" s")[0])
    wall = float(line.split("wall ")[1].split(" s")[0])
    assert "with start-up, imports and corpus loading" in line and wall > curation
    assert wall == pytest.approx(cli.process_seconds(), abs=600)   # the process's age, not the stage's


# ---------------------------------------------------------------- 3: replay of a folder corpus


def test_replay_of_a_folder_corpus_hashes_the_folder_as_recorded(tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["curate", "--corpus", str(SWE_AGENT), "--sandbox", "process", "--out", str(out)]) == 0
    assert json.loads((out / "execution.json").read_text())["corpus_paths"] == [str(SWE_AGENT.resolve())]
    assert cli.main(["replay", str(out), "--sandbox", "process"]) == 0
    assert cli.main(["replay", str(out), "--sandbox", "process", "--corpus", str(SWE_AGENT)]) == 0
    assert capsys.readouterr().out.count("replay identical") == 2


# ---------------------------------------------------------------- 4, 6: the hold-out, checked before any work


def test_a_hold_out_that_gives_nothing_to_judge_is_refused_before_any_work(tmp_path, capsys):
    # five tau-bench trajectories, every one with reward 0: no held-out record can be judged
    assert cli.main(run_args(tmp_path, "tau", [TAU])) == 2
    err = capsys.readouterr().err
    assert ("the held-out dev part (1 record(s): tau-bench-gpt-4o-airline.sample.json[1]) gives none to judge: "
            "1 make no tool call") in err and err.count("\n") == 1   # split by task id, the dev task is task 1
    assert "only 0 record(s) of the corpus call tools without a failed outcome" in err
    assert not (tmp_path / "tau").exists()


def test_run_says_the_real_dev_size_and_warns_when_it_cannot_tell_strategies_apart(tmp_path, capsys):
    created(tmp_path, "swe", [SWE_AGENT], "--max-length", "4096")   # the curated demo is longer than the profile's
    err = capsys.readouterr().err
    assert "dev: the held-out dev part holds 1 record(s); 1 give 4 step items (4 with tool calls as gold)" in err
    assert "\nsplit by task: train " in err and "dev 1 record(s) of 1 task(s)" in err   # what each side got
    assert "warning: the dev set holds 4 step items: P moves in steps of 0.250" in err
    assert "--tasks 60" not in err                                   # --tasks asks for more than there are


def test_a_c_only_acceptance_is_labelled_as_such(tmp_path):
    from evolver.final_rules import c_only
    from evolver.tables import format_log

    note = c_only(0.5, 0.2, {"P": 0.5, "C": 0.25})
    assert note.startswith("P is unchanged (0.5000): accepted on a lower C alone (0.2500 → 0.2000)")
    assert c_only(0.6, 0.2, {"P": 0.5, "C": 0.25}) is None and c_only(0.5, 0.3, {"P": 0.5, "C": 0.25}) is None
    store = created(tmp_path, "swe", [SWE_AGENT], "--max-length", "4096")
    for epoch, decision in ((0, {"P": 0.5, "C": 0.25, "J": 0.425, "accepted": True}),
                            (1, {"P": 0.5, "C": 0.2, "J": 0.44, "accepted": True, "c_only": True,
                                 "dev": {"tasks": 1, "episodes": 0, "step_items": 4}})):
        store.journal.append(journal_event({"event": "stage_started", "epoch": epoch, "stage": "decide"}))
        store.journal.append(journal_event({"event": "stage_done", "epoch": epoch, "stage": "decide", "result": decision}))
    log = format_log(store).splitlines()
    assert " C only " in log[3] and "accepted" not in log[3]
    assert "C only: accepted on a lower C alone with P unchanged" in "\n".join(log)
    # a run evaluated before records were told from tasks counted its held-out records as "tasks"
    assert "dev: 1 record(s) evaluated per epoch (the held-out tenth of the corpus), 4 step items; P is call_f1" in "\n".join(log)


# ---------------------------------------------------------------- 2: length limits, before training


def test_a_run_that_would_train_on_nothing_refuses_before_any_work_and_says_the_limits(tmp_path, capsys):
    # tau-bench's airline policy and its 14 tools do not fit the test profile's 1,024 / 1,536 tokens; named
    # by the user, the limits are kept (without them the run measures its own: tests/test_long_sessions.py)
    assert cli.main(run_args(tmp_path, "tau", [TAU], "--benchmark", "bfcl-single", "--tasks", "2",
                             "--max-length", "1024")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "curateevo: error: nothing would be trained: ρ0 keeps every record whole and, at profile test's limits, "
        "SFT 5: 5 cut, 5 dropped at max_length 1024; RL 48: 0 shortened, 48 dropped at max_prompt_tokens 1536; "
        "a run with --max-length ")
    assert "keeps every SFT record whole" in err[0] and "--train-max-prompt-tokens " in err[0]
    assert not (tmp_path / "tau").exists()


def test_the_log_shows_what_training_used_not_what_was_curated(tmp_path, capsys):
    # RL prompts fit 2,048 tokens, no SFT record fits 1,024: the epoch trains GRPO alone, and says so
    assert cli.main(run_args(tmp_path, "tau", [TAU], "--benchmark", "bfcl-single", "--tasks", "2",
                             "--train-max-prompt-tokens", "2048")) == 0
    err = capsys.readouterr().err
    assert "length (test): SFT 5: 5 cut, 5 dropped at max_length 1024; RL 48:" in err
    assert "warning: every one of the 5 SFT records is dropped at max_length 1024, so this training uses RL alone" in err
    trained = RunStore.open(tmp_path / "tau").done(0, "train-s0").result["trained"]
    assert trained["sft"] == 0 and 0 < trained["rl"] <= 48
    assert cli.main(["log", str(tmp_path / "tau")]) == 0
    log = capsys.readouterr().out
    assert f" 0/{trained['rl']}/0*" in log.splitlines()[2]
    assert "* epoch 0: curated 5/48/0; SFT/RL/mem shows what training used" in log


# ---------------------------------------------------------------- 5: one tool catalogue, or the real schemas


def test_records_without_schemas_share_one_catalogue_of_the_corpus_calls():
    records = load_corpus(TAU).records
    tools = records[0]["tools"]
    assert all(r["tools"] == tools and r["meta"]["tools_source"] == "catalogue" for r in records)
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    called = {c["function"]["name"] for r in records for m in r["messages"] for c in m.get("tool_calls") or ()}
    assert set(by_name) == called and len(called) == 9
    per_record = [{c["function"]["name"] for m in r["messages"] for c in m.get("tool_calls") or ()} for r in records]
    assert max(map(len, per_record)) < len(called)                  # no record alone calls them all
    assert by_name["book_reservation"]["properties"]["total_baggages"] == {"type": "integer"}
    assert "user_id" in by_name["get_user_details"]["required"]
    # an argument some calls omit is optional
    optional = {(name, arg) for name, p in by_name.items() for arg in p["properties"] if arg not in p.get("required", ())}
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for r in records for m in r["messages"]
             for c in m.get("tool_calls") or ()]
    for name, arg in optional:
        assert any(n == name and arg not in a for n, a in calls)
    for name, p in by_name.items():
        assert all(arg in a for n, a in calls if n == name for arg in p.get("required", ()))


def test_a_tools_file_gives_the_real_schemas_and_a_missing_tool_is_named(tmp_path):
    corpus = load_corpus(TAU, tools=TAU_TOOLS)
    assert corpus.from_tools_file == 5 and "5 records without tool schemas take the 14 tools" in corpus.tools_notice
    tools = corpus.records[0]["tools"]
    assert len(tools) == 14 and all(t["function"].get("description") for t in tools)
    assert corpus.records[0]["meta"]["tools_source"] == "file"
    short = tmp_path / "tools.json"
    short.write_text(json.dumps([t for t in json.loads(TAU_TOOLS.read_text())
                                 if t["function"]["name"] != "get_user_details"]))
    with pytest.raises(UserError, match=r"sample.json:2 \[0\]: .*'get_user_details', which is not in tools "
                                        r"\(with the schemas of --tools .*tools.json\); add it to that file"):
        load_corpus(TAU, tools=short)
    (tmp_path / "bad.json").write_text('{"tools": 3}')
    with pytest.raises(UserError, match=r"--tools .*bad.json: tools: must be a list of tools"):
        load_corpus(TAU, tools=tmp_path / "bad.json")


def test_curate_and_run_say_how_the_tool_lists_were_made(tmp_path, capsys):
    assert cli.main(["curate", "--corpus", str(TAU), "--sandbox", "process", "--out", str(tmp_path / "a")]) == 0
    assert ("5 tau-bench records share one catalogue of 9 tools (the union of the calls made, argument types "
            "inferred from the values, an argument optional where some call omits it, no descriptions); pass the "
            "real schemas with --tools FILE") in capsys.readouterr().err
    assert cli.main(["curate", "--corpus", str(TAU), "--tools", str(TAU_TOOLS), "--sandbox", "process",
                     "--out", str(tmp_path / "b")]) == 0
    assert "take the 14 tools of --tools" in capsys.readouterr().err
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["corpus"]["tools_sha256"] == load_corpus(TAU, tools=TAU_TOOLS).tools_file.sha256
    assert cli.main(["replay", str(tmp_path / "b"), "--sandbox", "process"]) == 0   # the schemas come back too
    tools = tmp_path / "airline-tools.json"
    tools.write_bytes(TAU_TOOLS.read_bytes())
    store = created(tmp_path, "tau", [TAU], "--tools", str(tools), "--benchmark", "bfcl-single",
                    "--max-length", "10752")   # what the length refusal names: the test profile's limit fits no record
    config = json.loads((store.root / "run.json").read_text())
    assert config["tools"] == str(tools.resolve()) and len(config["tools_sha256"]) == 64
    tools.write_text(TAU_TOOLS.read_text().replace("Get the details of an user", "Get a user"))
    capsys.readouterr()
    assert cli.main(["resume", str(store.root)]) == 2                 # the schemas a run trained with are part of it
    assert "the --tools file" in capsys.readouterr().err


# ---------------------------------------------------------------- 7: recorded outcomes


def test_the_profile_shows_the_outcome_mix_and_the_offline_proposer_can_drop_failures(tmp_path, capsys):
    from evolver.diagnose import diagnose
    from evolver.proposers.offline import OfflineProposer
    from sandbox.curate import execute
    from sandbox.executor import make_executor
    from sandbox.strategy_files import strategy_files

    assert cli.main(["curate", "--corpus", str(TAU_MIXED), "--sandbox", "process", "--out", str(tmp_path / "rho0")]) == 0
    assert "recorded outcomes   corpus 4 success, 4 failure, 0 unknown; retained 4 success, 4 failure" in \
        capsys.readouterr().out
    profile = json.loads((tmp_path / "rho0" / "profile.json").read_text())
    assert profile["raw"]["retained_outcomes"] == {"success": 4, "failure": 4, "unknown": 0}   # ρ0 keeps everything
    points, signals = diagnose([], curation_stats=profile)
    assert [p["family"] for p in points] == ["trained_failures"] and points[0]["count"] == 4
    assert signals["families"] == {}                                   # not a failed trajectory
    seed = strategy_files(cli.SEED_STRATEGY)
    revision = next(OfflineProposer().effectiveness(seed, points, signals))
    assert [e.key for e in revision.edits] == ["+drop_failed()"]
    result = execute(revision.files, load_corpus(TAU_MIXED), tmp_path / "rho1",
                     executor=make_executor("process", trusted=True))
    assert result.curation_stats["raw"]["retained_outcomes"] == {"success": 4, "failure": 0, "unknown": 0}
