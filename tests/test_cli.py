"""The command line: one-line errors with exit 2 for bad input, nothing half-written."""
import json
import subprocess
import sys

import pytest

from evolver import cli
from workspace.repository import Workspace

from conftest import SEED_STRATEGY

TOOLS = [{"type": "function", "function": {"name": "cd", "parameters": {"type": "object"}}}]


def good(rid="t1"):
    return {"id": rid, "task": "go", "tools": TOOLS, "messages": [
        {"role": "user", "content": "go to docs"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "cd", "arguments": "{\"folder\": \"docs\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "done"}]}


def mutate(change):
    record = good("t2")
    change(record)
    return json.dumps(record).encode()


BAD_LINES = {
    "not JSON": (b'{"id": "t2", "messages": [', "not JSON"),
    "not an object": (b'["a", "list"]', "object"),
    "wrong type": (mutate(lambda r: r.update(messages="hello")), "messages"),
    "unknown role": (mutate(lambda r: r["messages"][0].update(role="narrator")), "narrator"),
    "tool_call_id answering nothing": (mutate(lambda r: r["messages"][2].update(tool_call_id="c9")), "c9"),
    "call to a tool not in tools": (mutate(lambda r: r["messages"][1]["tool_calls"][0]["function"].update(name="rm")), "rm"),
    "arguments not JSON": (mutate(lambda r: r["messages"][1]["tool_calls"][0]["function"].update(arguments="{folder:")), "arguments"),
    "non-UTF-8": (b'{"id": "t2", "messages": [{"role": "user", "content": "caf\xe9"}]}', "UTF-8"),
    "duplicate id": (json.dumps(good("t1")).encode(), "duplicate id"),
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_corrupt_corpus_line_is_one_line_exit_2_and_no_output(kind, tmp_path):
    line, word = BAD_LINES[kind]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(json.dumps(good()).encode() + b"\n" + line + b"\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "evolver.cli", "curate", "--corpus", str(corpus), "--out", str(out)],
                          capture_output=True, timeout=120)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    lines = [line for line in err.splitlines() if not line.startswith("curating ")]
    assert len(lines) == 1 and lines[0].startswith(f"curateevo: error: {corpus}:2: "), err
    assert word in lines[0]
    assert "Traceback" not in err
    assert not out.exists()


def test_empty_corpus_file_is_reported_at_line_1(tmp_path, capsys):
    corpus = tmp_path / "empty.jsonl"
    corpus.write_bytes(b"")
    assert cli.main(["curate", "--corpus", str(corpus), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == f"curateevo: error: {corpus}:1: empty file, no records"
    assert not (tmp_path / "out").exists()


def test_skip_bad_lines_curates_the_valid_ones(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(json.dumps(good()).encode() + b"\nnot json\n")
    assert cli.main(["curate", "--corpus", str(corpus), "--out", str(tmp_path / "out"), "--on-bad-line", "skip",
                     "--quiet", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["raw"]["records"] == 1
    assert shown["length"]["sft_records"] == 1 and shown["length"]["survivors"] >= 1
    assert shown["lines"] == {"read": 2, "skipped": 1, "retained": 1}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["corpus"]["skipped_lines"] == 1
    skipped = [json.loads(line) for line in (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()]
    assert skipped == [{"path": str(corpus), "line": 2, "index": None,
                        "reason": "not JSON: Expecting value at column 1"}]


def test_skip_bad_lines_reports_the_true_retained_share(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(json.dumps(good()).encode() + b"\n" + b"not json\n" * 9)
    assert cli.main(["curate", "--corpus", str(corpus), "--out", str(tmp_path / "out"), "--on-bad-line", "skip",
                     "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "skipped lines  9 of 10 (listed in skipped.jsonl); retained 1 of 10 read (10.0%)" in out
    assert "length (cpu-small)  SFT 1: 0 cut, 0 dropped at max_length 1536" in out


def test_the_old_spelling_of_skipping_bad_lines_still_works_and_says_the_new_one(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(json.dumps(good()).encode() + b"\nnot json\n")
    assert cli.main(["curate", "--corpus", str(corpus), "--out", str(tmp_path / "out"), "--skip-bad-lines", "--quiet"]) == 0
    assert "--skip-bad-lines is the old spelling of --on-bad-line skip" in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["corpus"]["skipped_lines"] == 1


@pytest.mark.parametrize("command,spelled", [
    (("curate",), {"--on-bad-line"}), (("eval",), {"--on-bad-line"}), (("run",), {"--on-bad-line"}),
    (("train",), {"--set"}), (("bench", "quality"), {"--set"})])
def test_one_spelling_for_bad_lines_and_for_profile_overrides(command, spelled, capsys):
    """Every command that reads a corpus handles a bad line with --on-bad-line abort|skip, and every command
    that trains takes the profile's overrides as --set FIELD=VALUE (old spellings: aliases that say the new one)."""
    import re

    with pytest.raises(SystemExit):
        cli.main([*command, "--help"])
    options = set(re.findall(r"(--[a-z][a-z-]+)", capsys.readouterr().out))
    assert spelled <= options


def test_the_old_spelling_of_profile_overrides_says_the_new_one(tmp_path, capsys):
    from trainer.cli import parse_budget

    assert parse_budget(["sft_learning_rate=2e-4", "device=cpu", "threads=None"]) == \
        {"sft_learning_rate": 2e-4, "device": "cpu", "threads": None}
    rc = cli.main(["bench", "quality", "--budget", "no_such_field=1", "--cache", str(tmp_path / "c"), "--report-only"])
    err = capsys.readouterr().err
    assert rc == 2 and "--budget is the old spelling of --set" in err and "--set no_such_field=1" in err


def test_a_misspelled_profile_fails_before_curation(tmp_path, capsys, sample_corpus):
    with pytest.raises(SystemExit) as done:   # a choice checked when the command line is parsed
        cli.main(["curate", "--corpus", str(sample_corpus), "--out", str(tmp_path / "o"), "--profile", "cpu-smal", "--quiet"])
    assert done.value.code == 2 and "invalid choice: 'cpu-smal'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_missing_strategy_is_one_line(tmp_path, capsys, sample_corpus):
    assert cli.main(["curate", "--strategy", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("curateevo: error: ") and "\n" not in err


def test_diff_between_two_epochs_of_a_workspace(tmp_path, capsys):
    ws = Workspace.create(tmp_path / "ws", SEED_STRATEGY, params={"lambda": 0.3, "n_ref": 1e5, "seed": 0})
    edited = ws.files("best")
    edited["strategy.py"] += b"\nMAX_TURNS = 12\n"
    edited["inputs/signals.json"] = b'{"families":{"step_limit":31}}\n'
    sha = ws.commit_candidate(1, edited, "effectiveness: cap turns")
    ws.tag_epoch(1, sha)
    assert cli.main(["diff", str(tmp_path / "ws"), "0", "1"]) == 0
    out = capsys.readouterr().out
    assert "+MAX_TURNS = 12" in out
    assert "inputs: inputs/signals.json added (+1 -0 lines; --inputs shows them)" in out and "step_limit" not in out
    assert cli.main(["diff", str(tmp_path / "ws"), "0", "1", "--inputs"]) == 0
    out = capsys.readouterr().out
    assert "+MAX_TURNS = 12" in out and '+{"families":{"step_limit":31}}' in out
    assert cli.main(["diff", str(tmp_path / "ws"), "0", "7"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("curateevo: error: ") and "7" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, say", [
    (["curate", "--timeout", "nan"], "argument --timeout: 'nan': give a finite number of seconds above 0"),
    (["curate", "--timeout", "-1"], "argument --timeout: '-1': give a finite number of seconds above 0"),
    (["curate", "--timeout", "inf"], "argument --timeout: 'inf': give a finite number of seconds above 0"),
    (["curate", "--max-length", "0"], "argument --max-length: '0': give a whole number of 1 or more"),
    (["bench", "quality", "--seeds", "0"], "argument --seeds: '0': give a whole number of 1 or more"),
    (["bench", "quality", "--timeout", "0"], "argument --timeout: '0': give a finite number of seconds above 0"),
    (["eval", "--temperature", "nan"], "argument --temperature: 'nan': give a finite number of 0 or more"),
    (["eval", "--batch-size", "-3"], "argument --batch-size: '-3': give a whole number of 1 or more"),
    (["train", "--timeout", "nan"], "argument --timeout: 'nan': give a finite number of seconds above 0"),
])
def test_numeric_options_refuse_nan_infinities_and_out_of_range_at_parse_time(argv, say, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2 and say in capsys.readouterr().err


def test_a_config_files_list_option_given_a_scalar_is_refused(tmp_path, capsys):
    config = tmp_path / "run.json"
    config.write_text('{"ablate": "no-sft"}')
    assert cli.main(["run", "--config", str(config), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "ablate must be a list (e.g. ['no-sft']), not str 'no-sft'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_curate_gives_the_strategy_the_budget_a_run_gives_it_under_the_profile(tmp_path):
    """`curate --profile P` passes ctx.budget = trainer.recipe.curation_budget(P), as `run` does, so a
    strategy that fits its SFT set to the recipe (fit_budget) curates here what it curates in a run."""
    from trainer.recipe import curation_budget, get_profile

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(json.dumps(good()).encode() + b"\n")
    for profile in ("test", "cpu-small"):
        out = tmp_path / profile
        assert cli.main(["curate", "--corpus", str(corpus), "--out", str(out), "--profile", profile, "--quiet"]) == 0
        assert json.loads((out / "manifest.json").read_text())["budget"] == curation_budget(get_profile(profile))


def test_curate_warns_in_one_sentence_when_the_strategy_would_train_nothing(strategy, tmp_path, capsys):
    empty = strategy("""
        def curate(raw, ctx):
            return ctx.toolkit.Curated(sft=[], rl=[], memory=[])
        """)
    assert cli.main(["curate", "--strategy", str(empty), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == ["curateevo: warning: this strategy would train nothing: it curated no SFT record and no RL "
                        "record, so a run rolls such a candidate back unevaluated"]
    assert cli.main(["curate", "--out", str(tmp_path / "seed"), "--quiet"]) == 0   # ρ0 trains: no warning
    assert "would train nothing" not in capsys.readouterr().err


def test_the_old_name_of_the_prompt_cap_in_a_profile_override_says_the_new_one(capsys):
    from trainer.cli import parse_budget

    assert parse_budget(["max_prompt_length=512"]) == parse_budget(["max_prompt_tokens=512"]) == {"max_prompt_tokens": 512}
    assert capsys.readouterr().err == "note: --set max_prompt_length is the old spelling of --set max_prompt_tokens\n"


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_a_local_run_starts_its_trainings_forkserver_before_the_checks_that_import_transformers(backend, tmp_path,
                                                                                                 monkeypatch):
    """The warm trainings' forkserver imports torch, transformers, PEFT and TRL while `run` checks its prompts
    with the base model's tokenizer (trainer.warm.prestart); a Ray run trains on its cluster and starts none."""
    import trainer.train
    from evolver import run_cli

    calls = []
    monkeypatch.setattr(trainer.train, "prestart_training", lambda: calls.append("prestart"))

    def check_run_prompts(config):
        calls.append("check_run_prompts")
        raise RuntimeError("stopped at the prompt check")

    monkeypatch.setattr(run_cli, "check_run_prompts", check_run_prompts)
    with pytest.raises(RuntimeError, match="stopped at the prompt check"):
        cli.main(["run", "--profile", "test", "--base", "tiny-random", "--epochs", "1", "--tasks", "2",
                  "--sandbox", "process", "--backend", backend, "--runs-dir", str(tmp_path), "--name", "r"])
    assert calls == (["prestart"] if backend == "local" else []) + ["check_run_prompts"]
    assert not (tmp_path / "r").exists()
