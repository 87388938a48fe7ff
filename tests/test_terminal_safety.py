"""What a strategy or a file name says reaches the terminal bounded and with its control
characters escaped: an error cannot clear the screen, retitle the window or flood the log."""

from evolver import cli
from base.errors import MAX_MESSAGE_CHARS, printable

from conftest import SAMPLE_CORPUS

ESCAPES = "\x1b[2J\x1b]0;owned\x07\r\u202e"


def test_printable_escapes_control_characters_and_cuts_long_text():
    assert printable("a\x1b[31mb\x07\tc\nd\u202e") == "a\\x1b[31mb\\x07\tc\nd\\u202e"
    long = printable("x" * 40_000)
    assert long.startswith("x" * MAX_MESSAGE_CHARS) and long.endswith("[... 39000 more characters]")
    assert printable("naïve → ok") == "naïve → ok"


def _stderr_of(capsys, argv) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


def test_a_strategy_error_of_32_kb_with_escape_sequences_is_one_bounded_escaped_line(strategy, tmp_path, capsys):
    s = strategy(f"""
        def curate(raw, ctx):
            raise ValueError({ESCAPES!r} + "A" * 32_000 + {ESCAPES!r})
    """)
    code, err = _stderr_of(capsys, ["curate", "--strategy", str(s), "--corpus", str(SAMPLE_CORPUS),
                                    "--out", str(tmp_path / "out"), "--sandbox", "process", "--quiet"])
    assert code == 1
    assert err.startswith("curateevo: failed: strategy failed: ValueError: \\x1b[2J\\x1b]0;owned\\x07\\r\\u202e")
    assert len(err) < MAX_MESSAGE_CHARS + 100 and err.count("\n") == 1
    assert not any(c in err for c in "\x1b\x07\r\u202e")
    assert not (tmp_path / "out").exists()


def test_a_corpus_file_name_with_escape_sequences_is_printed_escaped(tmp_path, capsys):
    bad = tmp_path / f"corpus{ESCAPES}.jsonl"
    bad.write_text("not json\n")
    code, err = _stderr_of(capsys, ["curate", "--corpus", str(bad), "--out", str(tmp_path / "out"),
                                    "--sandbox", "process"])
    assert code == 2 and "corpus\\x1b[2J\\x1b]0;owned\\x07\\r\\u202e.jsonl" in err
    assert not any(c in err for c in "\x1b\x07\r\u202e")
