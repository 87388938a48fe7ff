"""A large output is checked in two halves at once (the second by a forked child): the artifacts,
the profile and the reason a candidate is rejected for are exactly those of one pass, and when
the child dies or fails the parent checks its half itself."""
import json
import os

import pytest

from curation_strategies import toolkit
from base import forked
from sandbox import checker
from sandbox.checker import CandidateRejected, check_output
from sandbox.exchange import to_file
from sandbox.runtime import Context, load_strategy, read_corpus, write_records

from conftest import ROOT, SAMPLE_CORPUS

pytestmark = pytest.mark.skipif(not forked.available(), reason="needs a second core and fork")
SEED = ROOT / "curation_strategies" / "seed"
SPLIT = 2048   # bytes: every SFT and RL file of the sample's output is halved


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """The seed strategy's output on the sample corpus, as the runtime writes it: {kind: [line]}."""
    raw = read_corpus(SAMPLE_CORPUS)
    out = tmp_path_factory.mktemp("seed-out")
    write_records(out, load_strategy(SEED).curate(raw, Context({}, 0, toolkit)))
    ids = [r["id"] for r in raw]
    return {kind: (out / f"{kind}.jsonl").read_text(encoding="utf-8").splitlines() for kind in ("sft", "rl", "memory")}, ids


def write(folder, files):
    folder.mkdir(parents=True)
    for kind, lines in files.items():
        (folder / f"{kind}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return folder


def check_both(tmp_path, files, raw_ids, **options):
    """(one pass, two halves): each the Checked and the files written, or the rejection's reason.
    The halves are checked a second time as a curation checks its job's files (`scratch`, their
    disk given back as they are read), which must give the same, and leave them no disk when it passes."""
    results = []
    for label, split, scratch in (("one", None, False), ("two", SPLIT, False), ("scratch", SPLIT, True)):
        out, dest = write(tmp_path / f"out-{label}", files), tmp_path / f"dest-{label}"
        dest.mkdir()
        try:
            checked = check_output(out, dest, raw_ids, encode=to_file, split_bytes=split, scratch=scratch, **options)
            results.append((checked, {p.name: p.read_bytes() for p in sorted(dest.iterdir())}))
            if scratch:
                assert [os.stat(p).st_blocks for p in sorted(out.iterdir())] == [0, 0, 0]
                assert [os.stat(p).st_size for p in sorted(out.iterdir())] == [
                    len("".join(line + "\n" for line in files[kind]).encode()) for kind in ("memory", "rl", "sft")]
        except CandidateRejected as exc:
            results.append(str(exc))
    scratched = results.pop()
    assert scratched == results[1]
    return results


@pytest.fixture(autouse=True)
def free_often(monkeypatch):
    monkeypatch.setattr(checker, "FREE_EVERY", 4096)   # a block: the sample's files are a few hundred KB


def test_halves_write_the_bytes_and_profile_of_one_pass(tmp_path, rows, monkeypatch):
    files, ids = rows
    assert len("\n".join(files["rl"])) > 4 * SPLIT and len(files["sft"]) >= 4
    joined = []   # the child's halves were joined, not checked again by the parent
    monkeypatch.setattr(checker, "_join", lambda *a, real=checker._join: joined.append(a[1].name) or real(*a))
    (one, one_files), (two, two_files) = check_both(tmp_path, files, ids)
    assert joined == ["sft.jsonl", "rl.jsonl"] * 2   # the halves, and the halves of scratch files
    assert two.artifacts == one.artifacts and two.profile == one.profile
    assert two_files == one_files   # no half left behind in the destination either
    assert sorted(two_files) == ["memory.jsonl", "rl.jsonl", "sft.jsonl"]


@pytest.mark.parametrize("split", [None, SPLIT])
def test_artifacts_not_kept_are_hashed_and_counted_as_written_ones(tmp_path, rows, split):
    """`keep=False` (a replay comparing hashes): the record files' hashes, counts and the profile
    are those of the files written, in one pass or in halves, and nothing of them is left in `dest`."""
    files, ids = rows
    results = []
    for keep in (True, False):
        out, dest = write(tmp_path / f"out-{keep}", files), tmp_path / f"dest-{keep}"
        dest.mkdir()
        results.append(check_output(out, dest, ids, encode=to_file, split_bytes=split, scratch=True, keep=keep))
        if not keep:
            assert list(dest.iterdir()) == []
    assert results[0].artifacts == results[1].artifacts and results[0].profile == results[1].profile
    assert sorted(results[0].artifacts) == ["memory.jsonl", "rl.jsonl", "sft.jsonl"]


def test_checking_scratch_files_gives_their_disk_back_as_it_reads(tmp_path, rows):
    """A curation's check writes the checked files beside the candidate's: with `scratch` the
    candidate's file shrinks on disk as the parent reads its first half, so the two together stay
    near one copy (at 10^4 long sessions the check needed ~3x what it kept and filled the disk)."""
    files, ids = rows
    files = {**files, "rl": files["rl"] * 4}   # large enough for many blocks a half
    files["rl"] = [with_id(line, f"{n}") for n, line in enumerate(files["rl"])]
    out, dest = write(tmp_path / "out", files), tmp_path / "dest"
    dest.mkdir()
    size, parent, seen = (out / "rl.jsonl").stat().st_size, os.getpid(), []

    def inspect(kind, record):   # the parent's view of the candidate's RL file on disk as it checks
        if kind == "rl" and os.getpid() == parent:
            seen.append(os.stat(out / "rl.jsonl").st_blocks * 512)

    check_output(out, dest, ids, encode=to_file, split_bytes=SPLIT, scratch=True, inspect=inspect)
    assert seen and seen[0] > 0.9 * size
    assert min(seen) < 0.6 * size   # the first half given back while it was read, the second kept for the child
    assert os.stat(out / "rl.jsonl").st_blocks == 0


def edited(files, kind, at, line=None, drop=False):
    lines = list(files[kind])
    at = at % len(lines)
    if drop:
        del lines[at]
    else:
        lines[at] = line
    return {**files, kind: lines}


def with_id(line, rid):
    record = json.loads(line)
    record["id"] = rid
    return json.dumps(record, ensure_ascii=False)


def cases(files):
    sft, rl = files["sft"], files["rl"]
    first_sft_id, first_rl_id = json.loads(sft[0])["id"], json.loads(rl[0])["id"]
    yield "malformed line in sft's second half", edited(files, "sft", -1, "{not json")
    yield "malformed in both halves of rl", edited(edited(files, "rl", 1, "[]"), "rl", -2, "{")
    yield "sft's second half before rl's first", edited(edited(files, "sft", -1, "{"), "rl", 0, "{")
    yield "an id of the first half again", edited(files, "rl", -1, with_id(rl[-1], first_rl_id))
    yield "an id again twice in the half", edited(edited(files, "rl", -1, with_id(rl[-1], first_rl_id)),
                                                   "rl", -3, with_id(rl[-3], first_rl_id))
    yield "an id again and a bad record after it", edited(edited(files, "sft", -1, "{"),
                                                          "sft", -2, with_id(sft[-2], first_sft_id))
    yield "the id again on a line the schema rejects", edited(
        files, "rl", -1, with_id(rl[-1], first_rl_id).replace('"reward"', '"reward_x"', 1))
    yield "an id of the half itself again", edited(files, "rl", -1, with_id(rl[-1], json.loads(rl[-2])["id"]))


@pytest.mark.parametrize("case", range(8))
def test_a_rejection_in_either_half_is_the_one_a_single_pass_gives(tmp_path, rows, case):
    name, files = list(cases(rows[0]))[case]
    one, two = check_both(tmp_path, files, rows[1])
    assert isinstance(one, str), name
    assert two == one, name


@pytest.mark.parametrize("extra", [0, 1])
def test_the_records_cap_is_passed_on_the_line_a_single_pass_finds(tmp_path, rows, extra):
    files, ids = rows
    total = len(files["sft"]) + len(files["rl"]) + len(files["memory"])
    cap = len(files["sft"]) + len(files["rl"]) - 3   # passed three lines before rl's end
    bad = edited(files, "rl", -3, "{") if extra else files   # that very line is also malformed
    caps = checker.OutputCaps(max_records=cap)
    one, two = check_both(tmp_path, bad, ids, caps=caps)
    assert one == two and "records in all (the cap)" in one and total > cap


def test_a_rejection_by_inspect_in_the_second_half_is_the_one_a_single_pass_gives(tmp_path, rows):
    files, ids = rows
    leaking = json.loads(files["rl"][-2])["id"]

    def inspect(kind, record):
        if record["id"] == leaking:
            raise CandidateRejected(f"{kind} record {leaking!r} leaks")

    one, two = check_both(tmp_path, files, ids, inspect=inspect)
    assert one == two == f"rl record {leaking!r} leaks"


def test_an_id_again_on_the_line_inspect_rejects_is_reported_as_the_id_again(tmp_path, rows):
    """One pass finds the repeated id before `inspect` sees the record; the halves must too."""
    files, ids = rows
    first_id = json.loads(files["rl"][0])["id"]
    marked = with_id(files["rl"][-2], first_id).replace('"content": "', '"content": "MARKER ', 1)
    assert "MARKER" in marked

    def inspect(kind, record):
        if any("MARKER" in (m.get("content") or "") for m in record["messages"]):
            raise CandidateRejected("inspect rejects the marked record")

    one, two = check_both(tmp_path, edited(files, "rl", -2, marked), ids, inspect=inspect)
    assert one == two and "duplicate id" in one


@pytest.mark.parametrize("how", ["dies", "raises"])
def test_when_the_child_cannot_finish_the_parent_checks_its_half(tmp_path, rows, how):
    files, ids = rows
    parent = os.getpid()

    def inspect(kind, record):   # the child, and only the child, ends or fails on its first record
        if os.getpid() != parent:
            if how == "dies":
                os._exit(9)
            raise RuntimeError("a bug in the child")

    (one, one_files), (two, two_files) = check_both(tmp_path, files, ids, inspect=inspect)
    assert (two.artifacts, two.profile, two_files) == (one.artifacts, one.profile, one_files)


def test_a_worker_that_went_silent_is_given_up_and_killed():
    def produce():
        yield 1
        import time
        time.sleep(60)
        yield 2

    with forked.Worker(produce) as worker:
        assert worker.next(timeout_s=30) == 1
        assert worker.next(timeout_s=0.5) is forked.LOST
        assert "sent nothing" in worker.lost and not worker.process.is_alive()


CHILD_OF_A_KILLED_PARENT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from base import forked
def produce():
    yield 1
    time.sleep(600)
worker = forked.Worker(produce)
assert worker.next(30) == 1
print(worker.process.pid, flush=True)
time.sleep(600)
"""


def test_the_child_dies_with_a_parent_killed_by_sigkill(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", CHILD_OF_A_KILLED_PARENT, str(ROOT)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = os.path.exists(f"/proc/{child}") and "Z" not in open(f"/proc/{child}/stat").read().split()[2]
    assert not alive
