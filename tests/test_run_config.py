"""`curateevo run --config FILE`: the file's options apply where no flag is given; bad files fail
with one sentence naming the file; the LLM settings in run.json name key variables, never keys."""
import json
import re

import pytest

from evolver import cli
from evolver.config import RunConfig
from base.errors import UserError
from evolver.run_cli import create_run, run_options

from conftest import SAMPLE_CORPUS


def configured(tmp_path, text: str, *flags: str) -> dict:
    config = tmp_path / "run.yaml"
    config.write_text(text)
    args = cli.build_parser().parse_args(["run", "--config", str(config), "--runs-dir", str(tmp_path / "runs"),
                                          "--name", "r", "--corpus", str(SAMPLE_CORPUS), *flags])
    return run_options(args)


def test_the_config_file_sets_options_and_flags_win(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-config-1")
    options = configured(tmp_path, "model: gpt-4.1-mini\nbudget-usd: 2.5\nepochs: 5\nlambda: 0.1\nagent_steps: 9\n", "--epochs", "2")
    assert [options[k] for k in ("model", "budget_usd", "epochs", "lam", "agent_steps")] == ["gpt-4.1-mini", 2.5, 2, 0.1, 9]
    store = create_run(options)
    config = json.loads((store.root / "run.json").read_text())
    assert config["proposer"] == "agent" and config["diagnosis"] == "rules+llm"
    assert config["llm"]["model"] == "gpt-4.1-mini" and config["llm"]["api_key_env"] == "OPENAI_API_KEY"
    assert config["agent"]["step_limit"] == 9 and config["lambda"] == 0.1
    assert "sk-canary" not in (store.root / "run.json").read_text()


def test_bad_config_files_fail_with_one_sentence(tmp_path, capsys):
    for text, expected in (("modle: x\n", "unknown option 'modle'"), ("model: [\n", "not valid YAML/JSON"),
                           ("- a\n", "a run config is a mapping"), ("llm-mode: sometimes\n", "llm-mode must be one of"),
                           ("epochs: three\n", "epochs must be an integer"), ("lambda: [1]\n", "lambda must be a number"),
                           ("profile: cpu-smal\n", "profile must be one of")):
        (tmp_path / "bad.yaml").write_text(text)
        assert cli.main(["run", "--config", str(tmp_path / "bad.yaml"), "--runs-dir", str(tmp_path / "runs")]) == 2
        err = capsys.readouterr().err
        assert expected in err and str(tmp_path / "bad.yaml") in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


def test_the_agent_needs_a_model_and_the_docker_sandbox(tmp_path, capsys):
    assert cli.main(["run", "--proposer", "agent", "--runs-dir", str(tmp_path)]) == 2
    assert "needs an LLM" in capsys.readouterr().err
    assert cli.main(["run", "--model", "m", "--sandbox", "process", "--corpus", str(SAMPLE_CORPUS), "--runs-dir", str(tmp_path)]) == 2
    assert "Docker sandbox only" in capsys.readouterr().err


def test_the_agent_without_a_docker_engine_is_refused_before_epoch_0(tmp_path, capsys, monkeypatch):
    from base.errors import RunFailed
    from sandbox import executor

    class NoEngine:
        def __init__(self):
            raise RunFailed("no Docker engine answers (connection refused); run `bash scripts/setup.sh` as root")

    real = executor.executor_class
    monkeypatch.setattr(executor, "executor_class", lambda name: NoEngine if name == "docker" else real(name))
    assert cli.main(["run", "--model", "m", "--corpus", str(SAMPLE_CORPUS), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "the code agent's commands run in the Docker sandbox, and no Docker engine answers" in err
    assert "--proposer offline" in err and err.count("\n") == 1 and not (tmp_path / "runs").exists()


def test_run_json_is_type_checked_when_read_back(tmp_path):
    good = RunConfig(corpus=("/c.jsonl",), corpus_sha256="x").to_json()
    assert RunConfig.from_json(good) == RunConfig(corpus=("/c.jsonl",), corpus_sha256="x")
    for change, expected in (({"epochs": "3"}, "epochs must be an integer"), ({"colour": 1}, "unknown setting(s) colour"),
                             ({"seeds": [0, 0]}, "seeds must be at least one, no repeats"),
                             ({"lambda": float("inf")}, "lambda must be a finite number"),
                             ({"proposer": "agent"}, "the code agent needs --model")):
        with pytest.raises(UserError, match=re.escape(expected)) as err:
            RunConfig.from_json({**good, **change}, where="RUN/run.json")
        assert str(err.value).startswith("RUN/run.json: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("flags, expected", [
    (["--tasks", "0"], "tasks must be at least 1"), (["--seeds", "0"], "--seeds must be at least 1"),
    (["--epochs", "0"], "epochs must be at least 1"), (["--n-ref", "0"], "--n-ref must be a finite number > 0, not 0.0"),
    (["--lambda", "nan"], "lambda must be a finite number"), (["--margin", "inf"], "margin must be a finite number"),
    (["--timeout", "-1"], "--timeout must be a finite number > 0, not -1.0"),
    (["--name", "../escape"], "must be a plain directory name"),
])
def test_impossible_run_options_are_one_sentence_before_anything_is_built(tmp_path, capsys, flags, expected):
    assert cli.main(["run", "--runs-dir", str(tmp_path / "runs"), "--corpus", str(SAMPLE_CORPUS), *flags]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "escape").exists()


def test_a_runs_dir_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert cli.main(["run", "--runs-dir", str(tmp_path / "file"), "--corpus", str(SAMPLE_CORPUS)]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_the_profile_names_the_default_base_model(tmp_path):
    args = cli.build_parser().parse_args(["run", "--profile", "test", "--runs-dir", str(tmp_path), "--name", "r",
                                          "--corpus", str(SAMPLE_CORPUS)])
    assert json.loads((create_run(run_options(args)).root / "run.json").read_text())["train"]["base"] == "tiny-random"


def test_an_output_place_that_cannot_be_written_is_one_sentence(tmp_path, capsys):
    assert cli.main(["run", "--runs-dir", "/proc", "--name", "x", "--corpus", str(SAMPLE_CORPUS),
                     "--benchmark", "bfcl-single"]) == 2
    err = capsys.readouterr().err
    assert "cannot write the run directory /proc/x" in err and err.count("\n") == 1
    assert cli.main(["curate", "--out", "/proc/curated", "--sandbox", "process", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "cannot write the output folder /proc/curated" in err and err.count("\n") == 1


def test_pricing_passes_through_run_and_a_missing_file_is_one_sentence(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-pricing")
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m": {"input": 0.5, "output": 1.5}}))
    store = create_run(configured(tmp_path, "epochs: 1\n", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                                  "--pricing", str(prices)))
    config = json.loads((store.root / "run.json").read_text())
    assert config["llm"]["pricing_file"] == str(prices.resolve())
    assert cli.main(["run", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--pricing", str(tmp_path / "nope.json"),
                     "--corpus", str(SAMPLE_CORPUS), "--runs-dir", str(tmp_path / "runs2")]) == 2
    err = capsys.readouterr().err
    assert "nope.json: no such file" in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs2").exists()
