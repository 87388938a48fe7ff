"""Stage backends without a cluster: the local backend's order and links, what the Ray backend
moves between machines (folders, the paths a result names), what a run's stages need, and the
in-flight record `status` reads."""
import json
from pathlib import Path
from dataclasses import replace

import pytest

from evolver.backends import InFlight, StageJob, needs_of, read_in_flight
from evolver.backends.local import LocalBackend
from evolver.backends.ray_cluster import bytes_of, pack, relocate, run_job, unpack
from evolver.backends.storage import Storage, readable
from evolver.config import RunConfig
from trainer import recipe
from trainer.launch import launcher_processes

CALLS = []


def make(out, name, adapter=None, artifacts=None):
    """A stage: writes `out/<name>.txt` naming what it read; returns where it wrote."""
    CALLS.append(name)
    out.mkdir(parents=True)
    read = adapter if artifacts is None else f"{adapter} and {(Path(artifacts) / 'sft.jsonl').read_text()}"
    (out / f"{name}.txt").write_text(f"{name} read {read}")
    return {"made": str(out / f"{name}.txt")}


def test_the_local_backend_runs_a_job_when_asked_after_what_it_needs_in_a_clean_folder(tmp_path):
    CALLS.clear()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "stale.txt").write_text("from a killed run")
    jobs = [StageJob("a", "test_backends:make", {"name": "a"}, tmp_path / "new" / "a"),   # its parent made too
            StageJob("b", "test_backends:make", {"name": "b"}, tmp_path / "b", after={"adapter": ("a", "made")})]
    batch = LocalBackend().submit(jobs)
    assert CALLS == []                                            # nothing runs before it is asked for
    assert batch.result("b") == {"made": str(tmp_path / "b" / "b.txt")}
    assert CALLS == ["a", "b"] and not (tmp_path / "b" / "stale.txt").exists()
    assert (tmp_path / "b" / "b.txt").read_text() == f"b read {tmp_path / 'new' / 'a' / 'a.txt'}"
    batch.result("a")
    assert CALLS == ["a", "b"]                                    # once


def test_a_folder_travels_whole_and_the_paths_a_result_names_follow_it(tmp_path):
    src = tmp_path / "worker" / "out"
    (src / "adapter").mkdir(parents=True)
    (src / "adapter" / "weights.bin").write_bytes(bytes(range(256)))
    (tmp_path / "driver" / "train-s0").mkdir(parents=True)
    (tmp_path / "driver" / "train-s0" / "old.txt").write_text("replaced")
    dest = unpack(pack(src), tmp_path / "driver" / "train-s0")
    assert (dest / "adapter" / "weights.bin").read_bytes() == bytes(range(256))
    assert sorted(p.name for p in (tmp_path / "driver").iterdir()) == ["train-s0"]   # no staging left, old gone
    assert not (dest / "old.txt").exists()
    result = {"adapter": str(src / "adapter"), "summary": {"steps": 3, "files": [str(src / "x")]}, "other": str(src) + "2"}
    assert relocate(result, str(src), str(dest)) == {"adapter": str(dest / "adapter"),
                                                      "summary": {"steps": 3, "files": [str(dest / "x")]},
                                                      "other": str(src) + "2"}


def test_a_run_needs_the_profiles_threads_and_gpus_only_when_it_trains_on_one(monkeypatch):
    cfg = RunConfig(profile="test")
    assert needs_of(cfg, gpus_available=True) == needs_of(cfg, gpus_available=False)   # the test profile pins the CPU
    need = needs_of(cfg, gpus_available=False)
    assert (need.train_cpus, need.train_gpus, need.eval_cpus, need.eval_gpus) == (2, 0, 2, 0)
    monkeypatch.setitem(recipe.PROFILES, "test", replace(recipe.PROFILES["test"], device="auto"))
    assert needs_of(cfg, gpus_available=False).train_gpus == 0
    torchrun = cfg.replace(launcher="torchrun --nproc_per_node 4")
    assert (needs_of(torchrun, gpus_available=True).train_gpus, needs_of(torchrun, gpus_available=True).eval_gpus) == (4, 1)
    assert launcher_processes("accelerate launch --num_processes=8") == 8 and launcher_processes("") == 1


def test_in_flight_stages_are_recorded_for_status_and_shown_when_they_change(tmp_path, capsys):
    board = InFlight(tmp_path / "stages.json")
    rows = [{"stage": "train-s0", "label": "epoch 0 train-s0", "state": "running", "node": "10.0.0.2/ab12cd34",
             "elapsed_s": 12.0, "eta_s": None},
            {"stage": "evaluate-s0", "label": "epoch 0 evaluate-s0", "state": "queued"}]
    board.update(rows)
    board.update([{**rows[0], "elapsed_s": 17.0}, rows[1]])   # only the time moved: not shown again
    err = capsys.readouterr().err
    assert err.count("in flight:") == 1
    assert "epoch 0 train-s0 on 10.0.0.2/ab12cd34 (12 s) · epoch 0 evaluate-s0 queued" in err
    assert read_in_flight(tmp_path)[0]["elapsed_s"] == 17.0
    board.finished("train", 30.0)
    assert board.eta("train", 12.0) == 18.0 and board.eta("evaluate", 1.0) is None
    board.clear()
    assert read_in_flight(tmp_path) == [] and not (tmp_path / "stages.json").exists()


def test_a_ray_address_without_the_ray_backend_is_refused():
    from base.errors import UserError

    with pytest.raises(UserError, match="ray_address must be empty unless backend is ray"):
        RunConfig(ray_address="10.0.0.1:6379")
    with pytest.raises(UserError, match="storage must be empty unless backend is ray"):
        RunConfig(storage="s3://bucket/runs")
    assert json.loads(json.dumps(RunConfig(backend="ray", ray_address="h:1").to_json()))["backend"] == "ray"


def test_with_storage_a_job_reads_its_inputs_and_returns_its_output_through_the_uri_alone(tmp_path):
    """What a Ray task does on a node that shares no disk with the driver: the inputs and the
    dependency's output come from the storage, and the output goes back into it."""
    storage = Storage(str(tmp_path / "bucket"))
    (tmp_path / "driver" / "artifacts").mkdir(parents=True)
    (tmp_path / "driver" / "artifacts" / "sft.jsonl").write_text("one record")
    artifacts = storage.put(pack(tmp_path / "driver" / "artifacts"))
    train = StageJob("train-s0", "test_backends:make", {"name": "train", "artifacts": str(tmp_path / "driver" / "artifacts")},
                     tmp_path / "driver" / "train-s0", ship=("artifacts",))
    spec = {"job": train, "ship": ["artifacts"], "after": [], "storage": storage.uri}
    trained = run_job(spec, [artifacts])
    result, out, ref = trained
    assert isinstance(ref, str) and ref.startswith(storage.uri + "/") and not Path(out).exists()   # its folder is gone
    evaluate = StageJob("evaluate-s0", "test_backends:make", {"name": "evaluate"}, tmp_path / "driver" / "eval-s0",
                        after={"adapter": ("train-s0", "made")})
    _, _, eval_ref = run_job({"job": evaluate, "ship": [], "after": [("adapter", "made")], "storage": storage.uri},
                             [trained])
    landed = unpack(bytes_of(eval_ref), tmp_path / "driver" / "eval-s0")   # what the driver does with a ref
    text = (landed / "evaluate.txt").read_text()
    assert text.startswith("evaluate read /") and text.endswith("/after/adapter/train.txt")   # a private copy
    assert (unpack(bytes_of(ref), tmp_path / "driver" / "train-s0") / "train.txt").read_text() == "train read None and one record"
    assert relocate(result, out, str(tmp_path / "driver" / "train-s0")) == {"made": str(tmp_path / "driver" / "train-s0" / "train.txt")}
    Storage.remove([artifacts, ref, eval_ref, ref])
    assert list((tmp_path / "bucket").iterdir()) == []


def test_a_storage_that_cannot_serve_is_one_sentence_and_a_torn_object_is_not_read(tmp_path):
    from base.errors import UserError

    with pytest.raises(UserError, match=r"--storage nope://x cannot be written \(ValueError: Protocol not known: nope\)"):
        Storage("nope://x").check()
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(UserError, match="cannot be written"):
        Storage(str(tmp_path / "file" / "under")).check()
    storage = Storage(str(tmp_path / "s"))
    ref = storage.check()
    assert readable(ref) == "" and Storage.get(ref) == b"curateevo storage probe\n"
    Path(ref).write_bytes(b"curateevo storage pro")   # a write cut short
    assert readable(ref).startswith("OSError: ") and "does not hold the bytes it was written with" in readable(ref)
    assert Storage("relative/dir").uri == str(Path("relative/dir").resolve())   # every node gets the driver's path


def test_a_head_address_where_nothing_listens_is_refused_at_once_not_after_rays_retries():
    import socket

    from evolver.backends.ray_cluster import _refused

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        assert _refused(address) == ""
    assert _refused(address).startswith("ConnectionRefusedError")   # closed now
    assert _refused("") == _refused("ray://head:10001") == ""          # auto, and Ray client addresses: Ray judges


class _Nodes:
    """Two live Ray nodes whose `inputs_digest` answers are given: a node on another disk cannot be
    started here, so the cluster's part (nodes, remote calls) is this double; the check is the real one."""

    class exceptions:
        RayError = RuntimeError

    def __init__(self, answers):
        self.answers = answers

    def nodes(self):
        return [{"Alive": True, "NodeID": f"n{i}", "NodeManagerAddress": f"10.0.0.{i}"} for i in range(len(self.answers))]

    def remote(self, fn):
        answers = iter(self.answers)

        class Call:
            def options(self, **_):
                return self

            def remote(self, corpus, tools):
                answer = next(answers)
                return fn(corpus, tools) if answer is None else answer
        return Call()

    def get(self, refs, timeout=None):
        return list(refs)


def test_a_node_that_reads_another_corpus_than_the_driver_is_one_sentence_before_any_work(tmp_path, monkeypatch):
    from evolver.backends import ray_cluster

    monkeypatch.setattr(ray_cluster, "_on", lambda ray, node_id: None)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    digest = ray_cluster.inputs_digest([str(corpus)], None)
    assert len(digest) == 64 and ray_cluster.inputs_digest([str(tmp_path / "gone.jsonl")], None).startswith("unreadable")
    cfg = RunConfig(corpus=(str(corpus),), corpus_sha256="x", benchmark="next-call")
    backend = ray_cluster.RayBackend(None)
    backend.check_corpus(_Nodes([None, None]), cfg)                      # both nodes read the driver's bytes
    with pytest.raises(Exception) as err:
        backend.check_corpus(_Nodes([None, "unreadable (FileNotFoundError: no such file)"]), cfg)
    assert "10.0.0.1 reads the corpus" in str(err.value) and "same path on each" in str(err.value)
    with pytest.raises(Exception) as err:
        backend.check_corpus(_Nodes([None, "0" * 64]), cfg)
    assert "other bytes than the driver's" in str(err.value)
    backend.check_corpus(_Nodes(["never asked"]), RunConfig(benchmark="bfcl-single"))   # an environment: not read
