"""`curateevo repair` rebuilds a curated epoch's deleted or edited artifacts byte for byte, by
executing its committed strategy again in the sandbox, and restores them only when the rebuilt
folder hashes as the journal recorded; otherwise it names the file that cannot be rebuilt."""
import pytest

from evolver import cli
from evolver.candidate import curate_candidate
from evolver.context import RunContext
from evolver.store import RunStore

from test_loop_seams import new_run


@pytest.fixture
def curated(tmp_path):
    """A run whose epoch 0 was curated by the loop's own stage (process sandbox), and its files' bytes."""
    ep = RunContext(new_run(tmp_path))
    artifacts = ep.store.epoch_dir(0) / "artifacts"
    ep.stage(0, "curate", lambda: curate_candidate(ep, 0), [artifacts])   # as evolver.loop records it
    return ep.store.root, artifacts, {p: p.read_bytes() for p in artifacts.rglob("*") if p.is_file()}


def _as_recorded(run, artifacts, original):
    assert {p: p.read_bytes() for p in artifacts.rglob("*") if p.is_file()} == original
    store = RunStore.open(run)
    assert store.done(0, "curate") is not None, "the journal's hash of the folder holds again"
    RunContext(store)   # what resume opens first: every artifact hashes as manifest.json recorded


def test_deleted_and_edited_artifacts_are_rebuilt_byte_for_byte_then_resume_opens(curated, capsys):
    run, artifacts, original = curated
    (artifacts / "sft.jsonl").unlink()
    (artifacts / "manifest.json").unlink()
    memory = artifacts / "memory.jsonl"
    memory.write_bytes(memory.read_bytes() + b"\n")
    (artifacts / "strategy" / "strategy.py").write_text("# edited\n")
    (artifacts / "stray.txt").write_text("added by hand")
    for refused in (["resume", str(run)], ["replay", str(run), "--epoch", "0", "--sandbox", "process"]):
        assert cli.main(refused) == 2
        err = capsys.readouterr().err
        assert f"rebuild it with `curateevo repair {run} --epoch 0`" in err and err.count("\n") == 1, err
    assert cli.main(["repair", str(run), "--epoch", "0", "--sandbox", "process"]) == 0
    out = capsys.readouterr()
    assert "epoch 0: rebuilt manifest.json, memory.jsonl, sft.jsonl, strategy/strategy.py; removed stray.txt" in out.err
    assert f"continue with `curateevo resume {run}`" in out.out
    _as_recorded(run, artifacts, original)
    assert cli.main(["repair", str(run)]) == 0   # every epoch: nothing left to do
    assert "epoch 0: intact, nothing to repair" in capsys.readouterr().err


def test_execution_json_cannot_be_rebuilt_and_nothing_changes(curated, capsys):
    run, artifacts, original = curated
    (artifacts / "execution.json").unlink()
    (artifacts / "sft.jsonl").unlink()
    assert cli.main(["repair", str(run), "--epoch", "0", "--sandbox", "process"]) == 2
    err = capsys.readouterr().err
    assert f"{artifacts / 'execution.json'} is missing and cannot be rebuilt" in err and err.count("\n") == 1
    assert not (artifacts / "sft.jsonl").exists(), "nothing was changed"
    run_info = artifacts / "execution.json"
    run_info.write_bytes(original[run_info].replace(b'"host"', b'"host" ', 1))   # edited: rebuilt folder hashes otherwise
    assert cli.main(["repair", str(run), "--epoch", "0", "--sandbox", "process"]) == 2
    err = capsys.readouterr().err
    assert f"{run_info} was changed and cannot be rebuilt" in err and err.count("\n") == 1
    assert not (artifacts / "sft.jsonl").exists() and not list(artifacts.parent.glob(".repair-*"))


def test_a_file_the_rebuild_does_not_reproduce_is_named_and_nothing_changes(curated, capsys, monkeypatch):
    from sandbox import curate as sandbox_curate

    run, artifacts, original = curated
    (artifacts / "sft.jsonl").unlink()
    monkeypatch.setattr(sandbox_curate, "runtime_sha256", lambda: "0" * 64)   # the runtime changed since
    assert cli.main(["repair", str(run), "--epoch", "0", "--sandbox", "process"]) == 2
    err = capsys.readouterr().err
    assert f"{artifacts / 'manifest.json'} cannot be rebuilt: the runtime changed since the epoch was curated" in err
    assert not (artifacts / "sft.jsonl").exists() and (artifacts / "manifest.json").read_bytes() == original[artifacts / "manifest.json"]


def test_an_epoch_never_curated_is_one_sentence(curated, capsys):
    run, _, _ = curated
    assert cli.main(["repair", str(run), "--epoch", "5"]) == 2
    assert "epoch 5 of" in capsys.readouterr().err


def test_a_run_with_its_own_holdout_is_rebuilt_from_its_own_train_part(tmp_path, capsys):
    """The rebuild curates what the run's strategy saw: the train part of the run's recorded split,
    not the default one (a next-call run whose split differs from the default)."""
    holdout = {"rank": "task", "seed": 7, "share": 0.3, "test_share": 0.1}
    ep = RunContext(new_run(tmp_path, benchmark="next-call", holdout=holdout))
    artifacts = ep.store.epoch_dir(0) / "artifacts"
    ep.stage(0, "curate", lambda: curate_candidate(ep, 0), [artifacts])
    original = {p: p.read_bytes() for p in artifacts.rglob("*") if p.is_file()}
    (artifacts / "sft.jsonl").unlink()
    assert cli.main(["repair", str(ep.store.root), "--epoch", "0", "--sandbox", "process"]) == 0, capsys.readouterr().err
    _as_recorded(ep.store.root, artifacts, original)
