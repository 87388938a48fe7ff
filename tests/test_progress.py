"""Live progress of a curation (issue 74): the runtime's stderr lines reach the caller's `on_progress`
as they arrive, a short curation says nothing, and neither the artifacts nor a failure reason
carry any of it."""
import re
import time

import pytest

from corpora import load_corpus
from sandbox.curate import CurationFailed, execute
from sandbox.executor import Limits
from sandbox.process_executor import ProcessExecutor
from sandbox.progress import MARKER, ProgressFilter, sentence
from workspace.repository import strategy_files

# the strategy runs in the runtime's process: it may shrink the interval and the clock's spacing
# to what a 45-record corpus reaches in a fraction of a second
EVERY_CHECK = """
        from sandbox import progress
        progress.INTERVAL_S, progress.CHECK_EVERY = 0.0, 10
"""


def curate(strategy_dir, corpus_path, out, said: list):
    return execute(strategy_files(strategy_dir), load_corpus([str(corpus_path)]), out, executor=ProcessExecutor(),
                   limits=Limits(timeout_s=60), on_progress=said.append)


def line(phase="curating", read=420_000, records=1_000_000, written=0, seconds=190) -> bytes:
    return f"{MARKER}phase={phase} read={read} records={records} written={written} seconds={seconds}\n".encode()


def test_a_progress_line_is_said_as_a_sentence_of_numbers():
    assert sentence(line()[len(MARKER):-1]) == "curation: 420,000 of 1,000,000 records read (3 min 10 s)"
    assert sentence(line(read=2_500_000)[len(MARKER):-1]) == "curation: 2,500,000 reads of 1,000,000 records (3 min 10 s)"
    assert sentence(line("writing", written=12_345, seconds=4000)[len(MARKER):-1]) == \
        "curation: writing artifacts, 12,345 records written (1 h 06 min)"
    assert sentence(b"phase=curating read=1 records=2 written=0 seconds=3; rm -rf /") is None


@pytest.mark.parametrize("size", [1, 5, 31, 4096])
def test_the_filter_takes_progress_lines_out_whatever_the_chunks(size):
    stream = (b"strategy says hi\n" + line() + b"Traceback (most recent call last):\n" + line("writing")
              + MARKER.encode() + b"phase=made up by the strategy\n" + b"ValueError: boom\n" + MARKER.encode()[:7])
    kept, said = [], []
    feed = ProgressFilter(kept.append, said.append)
    for at in range(0, len(stream), size):
        feed.feed(stream[at:at + size])
    feed.close()
    assert b"".join(kept) == (b"strategy says hi\nTraceback (most recent call last):\n" + MARKER.encode()
                              + b"phase=made up by the strategy\nValueError: boom\n" + MARKER.encode()[:7])
    assert said == ["curation: 420,000 of 1,000,000 records read (3 min 10 s)",
                    "curation: writing artifacts, 0 records written (3 min 10 s)"]


def test_a_flood_without_newlines_is_passed_on_not_held():
    kept = []
    feed = ProgressFilter(kept.append)
    feed.feed(MARKER.encode() + b"x" * 100_000)
    assert len(b"".join(kept)) == len(MARKER) + 100_000


def test_a_slow_curation_reports_records_read_then_written_and_its_artifacts_are_unchanged(
        strategy, sample_corpus, tmp_path):
    quiet = strategy("""
        def curate(raw, ctx):
            return honest(raw)
    """)
    talking = strategy(EVERY_CHECK + """
        def curate(raw, ctx):
            return honest(raw)
    """)
    said_quiet, said = [], []
    reference = curate(quiet, sample_corpus, tmp_path / "quiet", said_quiet)
    result = curate(talking, sample_corpus, tmp_path / "talking", said)
    assert said_quiet == [], "a curation of a few seconds says nothing"
    reads = [int(m.group(1).replace(",", "")) for m in map(re.compile(r"curation: ([\d,]+) of 45 records read \(\d+ s\)").fullmatch, said) if m]
    assert reads and reads == sorted(reads), said
    assert any(s.startswith("curation: writing artifacts, ") for s in said), said
    assert result.manifest.hashes() == reference.manifest.hashes(), "progress changed an artifact"
    assert MARKER not in result.execution["execution"]["stderr"]


def test_progress_arrives_while_the_strategy_runs_not_at_its_end(strategy, sample_corpus, tmp_path):
    dawdling = strategy(EVERY_CHECK + """
        import time
        def curate(raw, ctx):
            out = honest(raw)
            time.sleep(3)   # the lines of the reading above must reach the host meanwhile
            return out
    """)
    arrived = []
    execute(strategy_files(dawdling), load_corpus([str(sample_corpus)]), tmp_path / "out", executor=ProcessExecutor(),
            limits=Limits(timeout_s=60), on_progress=lambda text: arrived.append(time.monotonic()))
    assert arrived and time.monotonic() - arrived[0] > 1.5, "the progress lines came only when the strategy ended"


def test_a_strategy_that_fails_after_progress_is_rejected_with_its_own_error(strategy, sample_corpus, tmp_path):
    failing = strategy(EVERY_CHECK + """
        def curate(raw, ctx):
            sum(1 for _ in raw)
            raise ValueError("read everything, liked nothing")
    """)
    said = []
    with pytest.raises(CurationFailed) as info:
        curate(failing, sample_corpus, tmp_path / "out", said)
    assert said, "the progress before the failure was said"
    assert info.value.reason == "strategy failed: ValueError: read everything, liked nothing"
    assert MARKER not in info.value.execution.stderr


def test_a_long_check_of_the_artifacts_says_how_far_it_is(strategy, sample_corpus, tmp_path, monkeypatch):
    from sandbox import checker, progress

    quiet = strategy("""
        def curate(raw, ctx):
            return honest(raw)
    """)
    real = checker.check_output

    def slow(*args, **kwargs):   # a check of a few seconds, as at 10^5 trajectories, in a tenth of one
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(checker, "check_output", slow)
    monkeypatch.setattr(progress, "INTERVAL_S", 0.05)
    said = []
    curate(quiet, sample_corpus, tmp_path / "out", said)
    checking = [s for s in said if s.startswith("checking the artifacts: ")]
    assert len(checking) >= 2 and re.fullmatch(r"checking the artifacts: \d+\.\d\d GiB of checked records written "
                                                r"\(\d+ s\)", checking[0]), said
