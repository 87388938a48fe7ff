"""The command line explains itself: every option of every command has a help line, defaults are
shown, `--version` answers, and choices are checked when the command line is parsed."""
import re

import pytest

from evolver import cli

COMMANDS = [["curate"], ["replay"], ["diff"], ["sandbox", "build"], ["sandbox", "lock"], ["corpus", "build"],
            ["train"], ["eval"], ["export"], ["run"], ["resume"], ["test"], ["status"], ["log"], ["report"], ["trace"], ["bench", "quality"]]


def help_text(argv, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def options_without_help(text: str) -> list[str]:
    """Option lines of a help page that carry no description (on their line or the next)."""
    lines = text.splitlines()
    missing = []
    for i, line in enumerate(lines):
        m = re.match(r"^  (-\S.*?)(\s{2,}(\S.*))?$", line)
        if not m or m.group(3):
            continue
        follow = lines[i + 1] if i + 1 < len(lines) else ""
        if not re.match(r"^\s{10,}\S", follow):
            missing.append(m.group(1).strip())
    return missing


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_option_has_a_help_line(argv, capsys):
    assert options_without_help(help_text(argv, capsys)) == []


def test_defaults_are_shown(capsys):
    text = " ".join(help_text(["run"], capsys).split())
    assert "(default: 0.3)" in text and "(default: 186)" in text and "(default: cpu-small)" in text
    text = " ".join(help_text(["curate"], capsys).split())
    assert "(default: auto)" in text


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and re.fullmatch(r"curateevo \S+\n", capsys.readouterr().out)


@pytest.mark.parametrize("argv", [["run", "--profile", "cpu-smal"], ["run", "--benchmark", "bfcl-singel"],
                                  ["run", "--sandbox", "dokcer"], ["eval", "--benchmark", "nope"]])
def test_choices_are_checked_when_parsing(argv, capsys):
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(argv)
    assert done.value.code == 2 and "invalid choice" in capsys.readouterr().err
