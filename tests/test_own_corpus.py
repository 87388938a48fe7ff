"""A newcomer's own corpus, start to finish (issue 44): `run` refuses what it cannot do before any
work, in one sentence naming a fix that works; the dev and test parts depend on the records'
content and can be chosen; `test` scores the final strategy on the test part the loop never saw."""
import json
import re
import shutil
from pathlib import Path

import pytest

from base.errors import UserError
from evolver import cli, run_cli
from evolver.config import merge_options
from corpora import load_corpus
from corpora.split import DEFAULT_SPLIT, partition

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "examples" / "corpora" / "glaive-toolcall-40.json"   # in the checkout: a user has it too
SWE_AGENT = ROOT / "tests" / "fixtures" / "external" / "swe-agent"     # three SWE-agent .traj demos


def _options(**given):
    return merge_options({k.replace("-", "_"): v for k, v in given.items()}, {})


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_next_call_without_a_corpus_is_refused_before_any_work(tmp_path, capsys):
    assert cli.main(["run", "--benchmark", "next-call", "--profile", "test", "--runs-dir", str(tmp_path),
                     "--name", "r"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("curateevo: error: --benchmark next-call scores held-out records of your own corpus: give "
                           "--corpus FILE")
    assert "examples/corpora/glaive-toolcall-40.json" in line and SHIPPED.is_file()   # the example it names exists
    assert list(tmp_path.iterdir()) == []   # no run directory, no corpus built


def test_the_default_corpus_is_cached_under_the_runs_dir(tmp_path):
    store = run_cli.create_run(_options(profile="test", runs_dir=str(tmp_path / "runs"), name="d"))
    corpus = json.loads((store.root / "run.json").read_text())["corpus"]
    assert corpus and all(Path(p).is_relative_to(tmp_path / "runs" / "corpora") for p in corpus)
    assert Path(corpus[0]).is_file()


def test_the_length_refusal_comes_before_the_run_directory_and_its_fix_works(tmp_path, capsys):
    args = ["run", "--corpus", str(SHIPPED), "--profile", "test", "--sandbox", "process", "--ablate", "no-rl",
            "--max-length", "16", "--runs-dir", str(tmp_path), "--name", "short"]
    assert cli.main(args) == 2
    line = _one_error_line(capsys)
    assert "nothing would be trained" in line and not (tmp_path / "short").exists()
    fix = re.search(r"a run with --max-length (\d+) keeps every SFT record whole", line)
    assert fix, line
    store = run_cli.create_run(_options(corpus=[str(SHIPPED)], profile="test", sandbox="process", ablate=["no-rl"],
                                        max_length=int(fix.group(1)), runs_dir=str(tmp_path), name="short"))
    assert json.loads((store.root / "run.json").read_text())["train"]["budget"]["max_length"] == int(fix.group(1))


def test_the_split_depends_on_the_records_content_not_the_file_name(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "renamed-corpus.json"
    shutil.copy(SHIPPED, a)
    shutil.copy(SHIPPED, b)

    def positions(path):
        records = load_corpus([str(path)]).records
        index = {r["id"]: i for i, r in enumerate(records)}
        return [sorted(index[i] for i in part) for part in partition(records)]

    assert positions(a) == positions(b)   # the ids differ (a.json[3], renamed-corpus.json[3]); the parts do not
    train, dev, test = positions(a)
    assert len(dev) == len(test) == 4 and len(train) == 32 and not set(dev) & set(test)


def _calls(path, n, preamble=None):
    """`n` trajectories of our own that each call a tool; with `preamble`, each opens with the same
    instructions, acknowledged, and gives its task in a later user message (AgentTuning's shape)."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
    records = []
    for i in range(n):
        call = {"id": "c", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": i, "b": 7 * i})}}
        opening = [{"role": "user", "content": preamble}, {"role": "assistant", "content": "OK."}] if preamble else []
        records.append({"id": f"sum-{i}", "tools": tools, "messages": [
            *opening, {"role": "user", "content": f"Please add {i} and {7 * i} with the calculator tool."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": str(8 * i)},
            {"role": "assistant", "content": f"{i} + {7 * i} = {8 * i}."}]})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_corpus_too_small_for_a_dev_and_a_test_part_is_refused_before_any_work(tmp_path, capsys):
    for n in (1, 2):   # a part to curate, a dev part and a test part need a record each
        corpus = _calls(tmp_path / f"tiny-{n}.jsonl", n)
        assert cli.main(["run", "--corpus", str(corpus), "--profile", "test", "--sandbox", "process",
                         "--runs-dir", str(tmp_path), "--name", f"t{n}"]) == 2
        line = _one_error_line(capsys)
        assert f"{n} record(s) cannot be split so: use a corpus of at least 3 records of different tasks" in line
        assert not (tmp_path / f"t{n}").exists()
    assert _calls(tmp_path / "three.jsonl", 3) and run_cli.create_run(_options(
        corpus=[str(tmp_path / "three.jsonl")], profile="test", sandbox="process", runs_dir=str(tmp_path), name="t3"))


def test_records_sharing_their_opening_message_are_refused_naming_ids_that_work(tmp_path, capsys):
    corpus = _calls(tmp_path / "agent.jsonl", 5, preamble="You solve arithmetic tasks with the calculator tool. "
                                                        "Answer OK, then I give you the task.")
    args = ["run", "--corpus", str(corpus), "--profile", "test", "--sandbox", "process", "--runs-dir", str(tmp_path)]
    assert cli.main([*args, "--name", "p"]) == 2
    line = _one_error_line(capsys)   # copies of one task stay on one side: five records, one group, no part to hold out
    assert "its 5 record(s) not held out count as copies of 1 task(s)" in line and not (tmp_path / "p").exists()
    fix = re.search(r"`run --dev-ids FILE` with '([^']+)' and `run --test-ids FILE` with '([^']+)'$", line)
    assert fix, line
    (tmp_path / "dev.txt").write_text(fix.group(1) + "\n")
    (tmp_path / "test.txt").write_text(fix.group(2) + "\n")
    store = run_cli.create_run(_options(corpus=[str(corpus)], profile="test", sandbox="process", runs_dir=str(tmp_path),
                                        name="p", dev_ids=str(tmp_path / "dev.txt"), test_ids=str(tmp_path / "test.txt")))
    parts = partition(load_corpus([str(corpus)]).records, json.loads((store.root / "run.json").read_text())["holdout"])
    assert parts.dev == [fix.group(1)] and parts.test == [fix.group(2)] and len(parts.train) == 3
    from evolver.tables import dev_scope

    assert dev_scope(store.config) == "the records --dev-ids chose"   # what log and report say the dev set is


def test_what_a_run_keeps_outside_its_folder_is_in_the_one_user_cache(tmp_path, monkeypatch):
    from sandbox import image_lock, leakage
    from trainer import models

    monkeypatch.setenv("CURATEEVO_CACHE", str(tmp_path / "cache"))
    for folder in (models.cache_dir(), leakage._cache_dir(), image_lock.cache_dir()):
        assert folder.parent == tmp_path / "cache", folder
    monkeypatch.delenv("CURATEEVO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_dir().parent == leakage._cache_dir().parent == tmp_path / "xdg" / "curateevo"


def test_chosen_dev_and_test_ids_are_held_out(tmp_path):
    records = load_corpus([str(SHIPPED)]).records
    parts = partition(records, {**DEFAULT_SPLIT, "dev_ids": [records[3]["id"]], "test_ids": [records[5]["id"]]})
    assert parts.dev == [records[3]["id"]] and parts.test == [records[5]["id"]] and len(parts.train) == 38
    with pytest.raises(UserError, match=r"the dev ids name 1 record\(s\) the corpus does not hold \(first: 'nope'\)"):
        partition(records, {**DEFAULT_SPLIT, "dev_ids": ["nope"]})
    with pytest.raises(UserError, match="chosen for both dev and test"):
        partition(records, {**DEFAULT_SPLIT, "dev_ids": [records[3]["id"]], "test_ids": [records[3]["id"]]})


def test_three_swe_agent_demos_run_once_the_fix_each_refusal_names_is_applied(tmp_path, capsys):
    args = ["run", "--corpus", str(SWE_AGENT), "--profile", "test", "--sandbox", "process",
            "--runs-dir", str(tmp_path), "--name", "swe"]
    # the two demos that call tools are held out (dev, test); the third, curated, is too long for the test profile's
    # limits when the user names them (without them the run takes its own from the corpus: tests/test_long_sessions.py)
    assert cli.main([*args, "--max-length", "1024"]) == 2
    line = _one_error_line(capsys)
    length = re.search(r"a run with --max-length (\d+) keeps every SFT record whole", line)
    assert length and not (tmp_path / "swe").exists(), line
    options = dict(corpus=[str(SWE_AGENT)], profile="test", sandbox="process", max_length=int(length.group(1)),
                   runs_dir=str(tmp_path))
    store = run_cli.create_run(_options(**options, name="swe"))
    records = {r["id"]: r for r in load_corpus([str(SWE_AGENT)]).records}
    parts = partition(list(records.values()), json.loads((store.root / "run.json").read_text())["holdout"])
    assert len(parts.dev) == len(parts.test) == len(parts.train) == 1
    assert "dev: the held-out dev part holds 1 record(s); 1 give 4 step items" in capsys.readouterr().err
    # a held-out record chosen that gives nothing to judge: refused, naming records that do
    (tmp_path / "dev.txt").write_text("swe-agent/networking_1.traj\n")   # its actions are text, no tool call
    assert cli.main([*args[:-1], "swe2", "--max-length", length.group(1), "--dev-ids", str(tmp_path / "dev.txt")]) == 2
    line = _one_error_line(capsys)
    fix = re.search(r"`run --dev-ids FILE` with '([^']+)' and `--test-ids FILE` with '([^']+)'", line)
    assert fix and "1 make no tool call" in line and not (tmp_path / "swe2").exists(), line
    (tmp_path / "dev.txt").write_text(fix.group(1) + "\n")
    (tmp_path / "test.txt").write_text(fix.group(2) + "\n")
    store = run_cli.create_run(_options(**options, name="swe2", dev_ids=str(tmp_path / "dev.txt"),
                                        test_ids=str(tmp_path / "test.txt")))
    holdout = json.loads((store.root / "run.json").read_text())["holdout"]
    assert holdout["dev_ids"] == [fix.group(1)] and holdout["test_ids"] == [fix.group(2)]
    (tmp_path / "bad.txt").write_text("swe-agent/nope.traj\n")
    capsys.readouterr()
    assert cli.main([*args[:-1], "swe3", "--dev-ids", str(tmp_path / "bad.txt")]) == 2
    assert "the dev ids name 1 record(s) the corpus does not hold" in _one_error_line(capsys)
    assert not (tmp_path / "swe3").exists()


@pytest.fixture(scope="module")
def shipped_run(tmp_path_factory):
    """A tiny run on the corpus shipped in the repository (next-call benchmark, dev and test parts)."""
    runs = tmp_path_factory.mktemp("runs")
    assert cli.main(["run", "--corpus", str(SHIPPED), "--profile", "test", "--base", "tiny-random", "--epochs", "2",
                     "--tasks", "8", "--sandbox", "process", "--batch-size", "4", "--runs-dir", str(runs),
                     "--name", "own"]) == 0
    return runs / "own"


def test_test_scores_the_final_strategy_on_the_test_part_the_loop_never_saw(shipped_run, capsys):
    config = json.loads((shipped_run / "run.json").read_text())
    assert config["benchmark"] == "next-call" and config["holdout"] == DEFAULT_SPLIT
    records = load_corpus([str(SHIPPED)]).records
    train, dev, test = partition(records, config["holdout"])
    for artifacts in sorted(shipped_run.glob("epochs/*/artifacts")):
        manifest = json.loads((artifacts / "manifest.json").read_text())
        assert manifest["corpus"]["records"] == len(train) and manifest["corpus"]["holdout"] == DEFAULT_SPLIT
        text = (artifacts / "sft.jsonl").read_text() + (artifacts / "rl.jsonl").read_text()
        assert not [i for i in dev + test if f'"{i}"' in text], "a held-out record reached a strategy"
    evaluated = json.loads((shipped_run / "epochs" / "0" / "eval-s0" / "metrics.json").read_text())
    assert set(evaluated["tasks"]) <= set(dev)
    capsys.readouterr()
    assert cli.main(["test", str(shipped_run), "--held-out", "none"]) == 0
    out = capsys.readouterr().out
    assert "on the test split" in out
    tested = json.loads((shipped_run / "test" / "metrics.json").read_text())
    assert set(tested["tasks"]) == set(test) and tested["metric"] == "call_f1"
    assert cli.main(["log", str(shipped_run)]) == 0 and cli.main(["report", str(shipped_run)]) == 0


def test_dev_ids_on_a_corpus_with_an_environment_are_refused(tmp_path, capsys, sample_corpus):
    (tmp_path / "dev.txt").write_text("anything\n")
    assert cli.main(["run", "--corpus", str(sample_corpus), "--profile", "test", "--dev-ids", str(tmp_path / "dev.txt"),
                     "--runs-dir", str(tmp_path), "--name", "b"]) == 2
    line = _one_error_line(capsys)
    assert "--dev-ids chooses held-out records of a corpus without an environment" in line and "bfcl" in line
    assert not (tmp_path / "b").exists()
