"""`curateevo run --config FILE`: the file's options apply where no flag is given; bad files fail
with one sentence naming the file; the LLM settings in run.json name key variables, never keys."""
import json

from evolver import cli
from evolver.run_cli import apply_config, create_run

from conftest import SAMPLE_CORPUS


def configured(tmp_path, text: str, *flags: str):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    args = cli.build_parser().parse_args(["run", "--config", str(config), "--runs-dir", str(tmp_path / "runs"),
                                          "--name", "r", "--corpus", str(SAMPLE_CORPUS), *flags])
    apply_config(args, args.run_parser)
    return args


def test_the_config_file_sets_options_and_flags_win(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-config-1")
    args = configured(tmp_path, "model: gpt-4.1-mini\nbudget-usd: 2.5\nepochs: 5\nlambda: 0.1\nagent_steps: 9\n", "--epochs", "2")
    assert (args.model, args.budget_usd, args.epochs, args.lam, args.agent_steps) == ("gpt-4.1-mini", 2.5, 2, 0.1, 9)
    store = create_run(args)
    config = json.loads((store.root / "run.json").read_text())
    assert config["proposer"] == "agent" and config["diagnosis"] == "rules+llm"
    assert config["llm"]["model"] == "gpt-4.1-mini" and config["llm"]["api_key_env"] == "OPENAI_API_KEY"
    assert config["agent"]["step_limit"] == 9 and config["lambda"] == 0.1
    assert "sk-canary" not in (store.root / "run.json").read_text()


def test_bad_config_files_fail_with_one_sentence(tmp_path, capsys):
    for text, expected in (("modle: x\n", "unknown option 'modle'"), ("model: [\n", "not valid YAML/JSON"),
                           ("- a\n", "a run config is a mapping"), ("llm-mode: sometimes\n", "llm-mode must be one of")):
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
