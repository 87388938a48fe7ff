"""Stage backends without a cluster: the local backend's order and links, what the Ray backend
moves between machines (folders, the paths a result names), what a run's stages need, and the
in-flight record `status` reads."""
import json
from dataclasses import replace

import pytest

from evolver.backends import InFlight, StageJob, needs_of, read_in_flight
from evolver.backends.local import LocalBackend
from evolver.backends.ray_cluster import pack, relocate, unpack
from evolver.config import RunConfig
from trainer import recipe
from trainer.launch import launcher_processes

CALLS = []


def make(out, name, adapter=None):
    """A stage: writes `out/<name>.txt` naming what it read; returns where it wrote."""
    CALLS.append(name)
    out.mkdir(parents=True)
    (out / f"{name}.txt").write_text(f"{name} read {adapter}")
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
    assert json.loads(json.dumps(RunConfig(backend="ray", ray_address="h:1").to_json()))["backend"] == "ray"
