"""A researcher's own corpus, end to end: a real public file with no environment picks the next-call
benchmark, its held-out tenth never reaches a strategy, and the run fails fast on what it cannot do."""
import json
from pathlib import Path

import pytest

from evolver import cli
from evolver.store import RunStore
from corpora import load_corpus
from corpora.split import DEFAULT_SPLIT, partition
from sandbox.exchange import from_file

EXTERNAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "external"
GLAIVE = EXTERNAL / "llamafactory-glaive_toolcall_en_demo.json"   # LLaMA-Factory's ShareGPT tool-call demo
pytestmark = pytest.mark.usefixtures("trained_once")   # its epoch 0 trains what test_quality_next_call's ρ0 row trains: once per session


def test_a_corpus_without_environment_runs_on_its_held_out_tenth(tmp_path, capsys):
    assert GLAIVE.is_file(), "the external fixtures are part of the test data (../shared/fixtures/external)"
    args = ["run", "--corpus", str(GLAIVE), "--profile", "test", "--epochs", "2", "--tasks", "8",
            "--sandbox", "process", "--batch-size", "4", "--runs-dir", str(tmp_path), "--name", "g"]
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    assert "benchmark: next-call (chosen from the corpus: it has no environment" in captured.err
    root = tmp_path / "g"
    config = json.loads((root / "run.json").read_text())
    assert config["benchmark"] == "next-call" and config["metric"] == "call_f1" and config["train"]["base"] == "tiny-random"
    records = load_corpus([str(GLAIVE)]).records
    train_ids, dev_ids, test_ids = partition(records, config["holdout"])
    # a tenth each (a group of copies of one task stays whole, so a part may pass its tenth by one)
    assert config["holdout"] == DEFAULT_SPLIT and 20 <= len(dev_ids) <= 22 and 20 <= len(test_ids) <= 22
    assert len(train_ids) + len(dev_ids) + len(test_ids) == 200
    dev_ids = dev_ids + test_ids   # neither held-out part reaches a strategy
    for artifacts in sorted(root.glob("epochs/*/artifacts")):
        manifest = json.loads((artifacts / "manifest.json").read_text())
        assert manifest["corpus"]["records"] == len(train_ids) and manifest["corpus"]["holdout"] == DEFAULT_SPLIT
        rows = [from_file(kind, json.loads(line)) for kind in ("sft", "rl", "memory")
                for line in (artifacts / f"{kind}.jsonl").read_text().splitlines()]
        origins = {o for r in rows for o in r["meta"].get("origin", [])}
        assert origins and origins <= set(train_ids), f"held-out records reached {artifacts}"
        text = json.dumps(rows)
        assert not [i for i in dev_ids if i in text], f"a held-out id is named in {artifacts}"
    evaluated = json.loads((root / "epochs" / "0" / "eval-s0" / "metrics.json").read_text())
    assert set(evaluated["tasks"]) <= set(dev_ids) and evaluated["metric"] == "call_f1"
    assert evaluated["P"] < 0.05 and evaluated["metrics"]["step_accuracy"] is not None   # the old figure, beside P
    episodes = [json.loads(line) for line in (root / "epochs" / "0" / "eval-s0" / "trajectories.jsonl").read_text().splitlines()]
    assert episodes and {e["id"] for e in episodes} <= set(evaluated["tasks"])
    failed_points = json.loads((root / "epochs" / "0" / "diagnosis" / "failed_points.json").read_text())
    assert "missing_call" in {p["family"] for p in failed_points}   # a random model answers in noise, not calls
    assert cli.main(["report", str(root)]) == 0
    page = (root / "report" / "index.html").read_text()
    assert "call-level F1" in page and "../epochs/0/eval-s0/trajectories.jsonl" in page
    assert list((root / "tensorboard" / "epochs").glob("events.out.tfevents.*"))   # P, C, J per epoch, tracked
    assert cli.main(["log", str(root)]) == 0
    log = capsys.readouterr().out
    table = log.split("-" * 20, 1)[1].splitlines()[1:3]   # the epoch table's first rows, below its rule
    assert [line.split()[0] for line in table] == ["0", "1"]
    # the epoch replays byte for byte: replay re-applies the hold-out the manifest records
    assert cli.main(["replay", str(root), "--epoch", "0", "--sandbox", "process"]) == 0


def test_a_missing_api_key_fails_before_anything_runs(tmp_path, capsys, monkeypatch, sample_corpus):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert cli.main(["run", "--model", "gpt-4.1-mini", "--proposer", "offline", "--corpus", str(sample_corpus),
                     "--profile", "test", "--runs-dir", str(tmp_path), "--name", "k"]) == 2
    err = capsys.readouterr().err
    assert "needs its API key in $OPENAI_API_KEY" in err and err.count("\n") == 1
    assert not (tmp_path / "k").exists()


def test_an_endpoint_that_does_not_answer_fails_before_epoch_0(tmp_path, capsys, monkeypatch, sample_corpus):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert cli.main(["run", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--proposer", "offline",
                     "--corpus", str(sample_corpus), "--profile", "test", "--runs-dir", str(tmp_path), "--name", "e",
                     "--config", str(_config(tmp_path, "llm-mode: live\n"))]) == 2
    err = capsys.readouterr().err
    assert "no server answers at --base-url http://127.0.0.1:9/v1: start one" in err and "nothing was run" in err
    assert err.count("\n") == 1 and not (tmp_path / "e").exists()


def test_a_real_server_that_does_not_serve_the_model_is_one_sentence(tmp_path, capsys, model_server, sample_corpus):
    url, model = model_server   # transformers serve over the embedded model, a real OpenAI-compatible server
    for args, said in ((["--model", "nope", "--base-url", url], f"does not serve --model 'nope' (it serves: {model})"),
                       (["--model", model, "--base-url", url.removesuffix("/v1") + "/v9"], "/models is not found")):
        assert cli.main(["run", *args, "--proposer", "offline", "--corpus", str(sample_corpus), "--profile", "test",
                         "--runs-dir", str(tmp_path), "--name", "e",
                         "--config", str(_config(tmp_path, "llm-mode: live\n"))]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
        assert not (tmp_path / "e").exists()


def _config(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_a_stage_that_fails_is_journaled_and_shown(tmp_path, capsys, sample_corpus, monkeypatch):
    import evolver.stages as stages

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(stages, "train_epoch", broken)   # what the backend's training job calls
    with pytest.raises(OSError):
        cli.main(["run", "--corpus", str(sample_corpus), "--profile", "test", "--sandbox", "process",
                  "--runs-dir", str(tmp_path), "--name", "f", "--tasks", "2"])
    events = RunStore.open(tmp_path / "f").journal.events()
    assert events[-1].kind == "stage_failed" and events[-1].stage == "train-s0"
    assert "OSError: disk full" in events[-1].error
    capsys.readouterr()
    assert cli.main(["status", str(tmp_path / "f")]) == 0
    assert "failed: epoch 0 · train-s0: OSError: disk full" in capsys.readouterr().out


def test_a_run_where_nothing_fits_max_length_is_refused_before_its_directory_exists(tmp_path, capsys, sample_corpus):
    assert cli.main(["run", "--corpus", str(sample_corpus), "--benchmark", "bfcl-single", "--profile", "test",
                     "--sandbox", "process", "--ablate", "no-rl", "--max-length", "8", "--runs-dir", str(tmp_path),
                     "--name", "short"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("curateevo: error: nothing would be trained: ρ0 keeps every record whole")
    assert "SFT 45: " in err[0] and "a run with --max-length " in err[0]
    assert not (tmp_path / "short").exists()   # no run for `status` to send to `resume`


def _stopped_run(tmp_path) -> Path:
    import subprocess
    import sys

    root = tmp_path / "stopped"
    root.mkdir()
    (root / "run.json").write_text(json.dumps({"corpus": [str(GLAIVE)], "corpus_sha256": "x", "epochs": 2}))
    (root / "journal.jsonl").write_text(json.dumps({"event": "stage_started", "epoch": 0, "stage": "train-s0",
                                                    "time": "2026-01-01T00:00:00+00:00"}) + "\n")
    return root


def test_status_tells_a_running_run_from_a_stopped_one(tmp_path, capsys):
    import subprocess
    import sys

    root = _stopped_run(tmp_path)
    assert cli.main(["status", str(root)]) == 0
    assert "stopped (crashed or killed" in capsys.readouterr().out
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                               str(root / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert cli.main(["status", str(root)]) == 0
        assert "running: stage_started epoch 0 train-s0" in capsys.readouterr().out
    finally:
        holder.kill()
        holder.wait()


def test_status_piped_into_head_prints_no_traceback(tmp_path):
    import subprocess
    import sys

    root = _stopped_run(tmp_path)
    # stdout is a pipe whose reader is gone (what `| head` leaves once it has its lines)
    code = ("import os, sys; from evolver import cli; r, w = os.pipe(); os.close(r); os.dup2(w, 1); "
            f"sys.exit(cli.main(['status', {str(root)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
