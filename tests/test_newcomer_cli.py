"""The small things a newcomer meets first (issue 44, item 10): every positional argument has help,
defaults read as text, every --profile names its choices, the two `--model`s are told apart,
`replay` leaves no temporary folder, and progress bars leave one line each in a log."""
import argparse
import io
import json
from pathlib import Path

from trainer.progress import LogBar, progress_bar
from evolver import cli
from trainer.recipe import PROFILES

SHIPPED = Path(__file__).resolve().parents[1] / "examples" / "corpora" / "glaive-toolcall-40.json"


def _parsers(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_positional_has_help_and_every_profile_option_names_its_choices():
    seen_profile = 0
    for path, parser in _parsers(cli.build_parser()):
        text = parser.format_help()
        assert "PosixPath" not in text, path
        for action in parser._actions:
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"curateevo {' '.join(path)}: positional {action.dest} has no help"
            if "--profile" in action.option_strings:
                seen_profile += 1
                assert list(action.choices) == list(PROFILES), path
                assert all(f"{name} (" in action.help for name in PROFILES), path
    assert seen_profile >= 5   # curate, run, train, export, bench quality


def test_the_two_model_options_are_told_apart_and_the_old_spelling_still_works():
    parser = cli.build_parser()
    assert parser.parse_args(["eval", "--model", "tiny-random"]).base == "tiny-random"   # the old spelling
    subs = dict(_parsers(parser))
    eval_help = next(a.help for a in subs[("eval",)]._actions if "--model" in a.option_strings)
    run_help = next(a.help for a in subs[("run",)]._actions if "--model" in a.option_strings)
    assert "not `run --model`" in eval_help and "the model being trained is --base" in run_help


def test_replay_leaves_no_temporary_folder(tmp_path, monkeypatch, capsys):
    import tempfile

    out = tmp_path / "curated"
    assert cli.main(["curate", "--corpus", str(SHIPPED), "--sandbox", "process", "--profile", "test",
                     "--out", str(out), "--quiet"]) == 0
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    assert cli.main(["replay", str(out), "--sandbox", "process"]) == 0
    assert "replay identical" in capsys.readouterr().out
    assert not list(temp.glob("curateevo-replay-*"))


def test_a_progress_bar_in_a_log_is_one_line(monkeypatch):
    from trainer.progress import RELAYED_TO_TERMINAL

    monkeypatch.setenv(RELAYED_TO_TERMINAL, "1")   # a training child whose parent shows its output in a terminal
    assert not isinstance(progress_bar(5, "steps", "step", io.StringIO()), LogBar)
    monkeypatch.delenv(RELAYED_TO_TERMINAL)
    log = io.StringIO()   # not a terminal
    bar = progress_bar(5, "steps", "step", log)
    assert isinstance(bar, LogBar)
    for _ in range(5):
        bar.update(1)
    bar.set_postfix({"loss": "0.5"}, refresh=False)
    bar.write("SFT step 5/5: loss 0.5")
    bar.close()
    bar.close()
    lines = log.getvalue().splitlines()
    assert lines[0] == "SFT step 5/5: loss 0.5" and len(lines) == 2 and "\r" not in log.getvalue()
    assert lines[1].startswith("steps: 5/5 steps in ") and lines[1].endswith(", loss 0.5")


def test_an_evaluation_logs_each_bar_once(tmp_path, capsys):
    assert cli.main(["eval", "--benchmark", "next-call", "--corpus", str(SHIPPED), "--base", "tiny-random",
                     "--tasks", "2", "--batch-size", "2", "--out", str(tmp_path / "e")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and sum(line.startswith("steps: ") for line in err.splitlines()) == 1, err
    assert json.loads((tmp_path / "e" / "metrics.json").read_text())["metric"] == "call_f1"


def test_a_first_run_writes_its_tiny_model_without_a_bar_in_the_log(tmp_path, monkeypatch, capfd):
    import shutil

    from transformers.utils import logging as hf_logging

    from trainer import models

    tokenizer = models.embedded_tokenizer_dir()   # converted once; only the model is built here
    monkeypatch.setattr(models, "cache_dir", lambda: tmp_path / "cache")
    shutil.copytree(tokenizer, tmp_path / "cache" / tokenizer.name)
    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()   # as a fresh process starts
    try:
        built = models.tiny_model_dir()   # what a newcomer's first run does ("Writing model shards")
    finally:
        (hf_logging.enable_progress_bar if was_on else hf_logging.disable_progress_bar)()
    assert (built / "config.json").is_file() and built.parent == tmp_path / "cache"
    err = capfd.readouterr().err
    assert "Writing model shards" not in err and "\r" not in err, err


def test_the_log_line_spells_the_plural_of_its_unit():
    log = io.StringIO()
    bar = LogBar(2, "diagnosis", "trajectory", log)
    bar.update(2)
    bar.close()
    assert log.getvalue().startswith("diagnosis: 2/2 trajectories in ")
