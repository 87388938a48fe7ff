"""`curateevo run --set KEY=VALUE`: any setting by its dotted key in run.json, checked by its own
declaration, applied last; a key that names no setting, a value of the wrong type and a setting the
run owns are one sentence each, before anything is built."""
import json

import pytest

from base.errors import UserError
from evolver import cli, overrides
from evolver.config import RunConfig
from evolver.run_cli import create_run, run_options

from conftest import SAMPLE_CORPUS


def test_dotted_keys_nest_and_values_read_as_yaml():
    assert overrides.nested(["a.b=1", "a.c=x", "d=[0, 1]", "e=true", "f=1e-4", "g="]) == \
        {"a": {"b": 1, "c": "x"}, "d": [0, 1], "e": True, "f": "1e-4", "g": ""}
    for bad in ("novalue", "a..b=1", "=3"):
        with pytest.raises(UserError, match="write KEY=VALUE"):
            overrides.nested([bad])


def test_a_nested_setting_a_free_mapping_key_and_a_top_level_one_are_set_and_checked():
    cfg = overrides.apply(RunConfig(), ["train.profile=test", "eval.batch_size=16", "agent.step_limit=40",
                                        "train.budget.sft_steps=5", "epochs=2", "lambda=0.5"])
    assert (cfg.train.profile, cfg.eval.batch_size, cfg.agent.step_limit, cfg.epochs, cfg.lam) == \
        ("test", 16, 40, 2, 0.5)
    assert cfg.train.budget == {"sft_steps": 5}
    assert cfg.eval.benchmark == cfg.benchmark   # what the run sets itself stays the run's


@pytest.mark.parametrize("spec, expected", [
    ("eval.batch_sise=16", "--set eval.batch_sise: no such setting; did you mean eval.batch_size?"),
    ("trian.profile=x", "--set trian: no such setting; did you mean train?"),
    ("epochs.x=1", "--set epochs.x: epochs is a single value, not a group of settings"),
    ("eval.batch_size=many", "--set: eval.batch_size"),
    ("epochs=0", "--set: epochs"),
    ("eval.benchmark=bfcl", "--set eval.benchmark: the run sets it from its own setting (benchmark)"),
])
def test_a_wrong_key_or_value_is_one_sentence(spec, expected):
    with pytest.raises(UserError) as err:
        overrides.apply(RunConfig(), [spec])
    assert str(err.value).startswith(expected) and "\n" not in str(err.value), str(err.value)


def test_set_wins_over_a_flag_and_lands_in_run_json(tmp_path):
    args = cli.build_parser().parse_args(["run", "--corpus", str(SAMPLE_CORPUS), "--profile", "test", "--base",
                                          "tiny-random", "--epochs", "3", "--set", "epochs=1", "--set",
                                          "agent.repairs=1", "--runs-dir", str(tmp_path), "--name", "r"])
    root = create_run(run_options(args)).root
    doc = json.loads((root / "run.json").read_text())
    assert doc["epochs"] == 1 and doc["agent"]["repairs"] == 1
    assert RunConfig.from_json(doc).epochs == 1


def test_a_bad_set_is_refused_before_the_run_directory_exists(tmp_path, capsys):
    assert cli.main(["run", "--corpus", str(SAMPLE_CORPUS), "--set", "eval.memory_kk=2",
                     "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "--set eval.memory_kk: no such setting; did you mean eval.memory_k?" in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()
