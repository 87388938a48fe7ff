"""The prepared GPU run (bench/gpu_run.py, issue 42) as a dry run on the CPU: `pack` fills carry
folders under a size limit, cutting the model where a folder is full; `run` re-joins it (sha256
checked), installs the carried wheels into a scratch target, runs the plan at the `test` profile
under a budget that stops it after one unit, and a later invocation resumes from the cache."""
import base64
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gpu_carry  # noqa: E402


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A real (installable) pure-Python wheel."""
    dist = f"{name.replace('-', '_')}-{version}"
    entries = {**files, f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
               f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b'=').decode()},{len(v)}\n"
                     for k, v in entries.items()) + f"{dist}.dist-info/RECORD,,\n"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:   # stored: the model's bytes stay incompressible
        for k, v in {**entries, f"{dist}.dist-info/RECORD": record.encode()}.items():
            z.writestr(k, v)
    return path


def make_wheelhouse(folder: Path) -> tuple[Path, Path]:
    """A wheel folder with a tool and a 3 MB "model" wheel, and the lock that pins both."""
    house = folder / "wheels"
    house.mkdir()
    tool = make_wheel(house, "demo-tool", "1.0", {"demo_tool/__init__.py": b"VALUE = 42\n"})
    model = make_wheel(house, "demo-model", "0.1", {"demo_model/__init__.py": b"", "demo_model/w.bin": os.urandom(3_000_000)})
    lock = folder / "test.lock"
    lock.write_text("".join(f"{n}=={v} --hash=sha256:{gpu_carry.sha256_file(p)}\n"
                            for n, v, p in (("demo-tool", "1.0", tool), ("demo-model", "0.1", model))))
    return house, lock


def test_a_split_file_joins_only_whole_and_unchanged(tmp_path):
    src = tmp_path / "model.bin"
    src.write_bytes(os.urandom(10_000))
    a, b, joined = tmp_path / "a", tmp_path / "b", tmp_path / "joined"
    joined.mkdir()
    parts = gpu_carry.split(src, [6_000, 4_000], [a, b])
    assert [p["bytes"] for p in parts["parts"]] == [6_000, 4_000]
    assert gpu_carry.join(parts, a, joined) is None                  # a part has not arrived
    (b / "model.bin.part02").rename(a / "model.bin.part02")
    damaged = bytearray((a / "model.bin.part01").read_bytes())
    damaged[0] ^= 1
    original = (a / "model.bin.part01").read_bytes()
    (a / "model.bin.part01").write_bytes(bytes(damaged))
    with pytest.raises(gpu_carry.CarryError, match="sha256 differs"):
        gpu_carry.join(parts, a, joined)
    (a / "model.bin.part01").write_bytes(original)
    assert gpu_carry.join(parts, a, joined).read_bytes() == src.read_bytes()


def test_the_wheels_carried_are_the_locked_ones_the_image_lacks_or_holds_at_another_version():
    locked = {"trl": ("1.16.0", []), "numpy": ("2.4.6", []), "transformers": ("5.24.0", []), "torch": ("2.13.0+cpu", []),
              "accelerate": ("1.15.0", []), "msgspec": ("0.22.0", [])}
    assert gpu_carry.wheel_set(locked) == {"msgspec": "0.22.0", "transformers": "5.24.0", "trl": "1.16.0"}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_run.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@dataclass
class FirstRun:
    work: Path            # the fixture's folder: out1/ is the first command's output
    sizes: list[int]      # the bytes of each carry folder as packed
    manifest: dict        # the first folder's carry.json
    arrived: Path         # where the folders arrived (the first command moved their files on)
    state: Path           # the state the first command left, which a later one continues


@pytest.fixture(scope="module")
def first_run(quality_corpora, tmp_path_factory) -> FirstRun:
    """`pack` at the `test` profile on the tiny model, then a first `run` whose budget is already
    spent: it installs, joins and runs one unit. test_a_later_command_… continues its state."""
    tmp_path = tmp_path_factory.mktemp("gpu-run")
    house, lock = make_wheelhouse(tmp_path)
    wild, _ = quality_corpora
    carry_dir, state = tmp_path / "carry", tmp_path / "state"
    packed = _run("pack", "--profile", "test", "--base", "tiny-random", "--device", "cpu", "--rows", "oracle",
                  "--tasks", "2", "--second-profile", "test", "--throughput-base",
                  "tiny-random", "--throughput-sft-steps", "1", "--throughput-grpo-steps", "1", "--throughput-short", "--epochs", "1",
                  "--run-tasks", "2", "--test-tasks", "2", "--held-out", "acebench", "--max-new-tokens", "4", "--run-sandbox", "process",
                  "--wild", str(wild), "--sandbox", "process", "--lock", str(lock), "--wheels", "demo-tool,demo-model",
                  "--wheelhouse", str(house), "--model-wheel", "demo-model", "--room-bytes", str(2 * 2**20),
                  "--work", str(tmp_path / "pack"), "--out", str(carry_dir))
    assert packed.returncode == 0, packed.stderr
    folders = sorted(carry_dir.glob("carry-*"))
    sizes = [sum(f.stat().st_size for f in d.iterdir()) for d in folders]
    manifest = json.loads((folders[0] / "carry.json").read_text()) if folders else {}

    # every folder has arrived; a budget already spent lets the first unit (a cell) run, then stops
    arrived = tmp_path / "arrived"
    arrived.mkdir()
    for folder in folders:
        os.rename(folder, arrived / folder.name)
    first = _run("run", "--budget-s", "0", "--grace-s", "600", "--out", str(tmp_path / "out1"), "--state", str(state),
                 "--carry-from", str(arrived), "--model-wheel", "demo-model")
    assert first.returncode == 0, first.stderr
    return FirstRun(tmp_path, sizes, manifest, arrived, state)


def test_pack_fills_carry_folders_and_a_spent_budget_installs_joins_and_runs_one_unit(first_run):
    state = first_run.state
    assert len(first_run.sizes) >= 2 and all(size <= 2 * 2**20 for size in first_run.sizes)
    assert "demo_model-0.1-py3-none-any.whl" in first_run.manifest["split"]   # the model was cut where a folder filled
    assert (state / "site" / "demo_tool" / "__init__.py").is_file()            # installed from the carried wheel
    assert (state / "inbox" / "demo_model-0.1-py3-none-any.whl").is_file()     # joined, its sha256 checked
    doc = json.loads((first_run.work / "out1" / "summary.json").read_text())
    assert doc["setup"]["check"]["device"] == "cpu"
    status = {r["unit"]: r["status"] for r in doc["this_time"]}
    assert status["calibration/oracle"] == "done"
    assert {s for u, s in status.items() if u != "calibration/oracle"} == {"not started"}
    with tarfile.open(first_run.work / "out1" / "cells.tar.gz") as tar:
        assert any(n.startswith("cells/") and n.endswith("cell.json") for n in tar.getnames())


def test_a_later_command_finishes_the_plan_a_stopped_one_loses_its_unit_and_a_zero_budget_only_transfers(
        first_run, tmp_path):
    """Continues the first run's state (the ledger, the installed wheels): each command here is what
    a next device command would do on the warm machine."""
    state, arrived = first_run.state, first_run.arrived
    # a second command with time to spare finishes the plan, computing nothing twice
    second = _run("run", "--budget-s", "600", "--out", str(tmp_path / "out2"), "--state", str(state),
                  "--carry-from", str(arrived), "--model-wheel", "demo-model")
    assert second.returncode == 0, second.stderr
    doc = json.loads((tmp_path / "out2" / "summary.json").read_text())
    status = {r["unit"]: r["status"] for r in doc["this_time"]}
    assert status == {"calibration/oracle": "cached", **dict.fromkeys(
        ["calibration/report", "cpu-small/oracle", "cpu-small/report", "throughput/tiny-random", "evolution/run",
         "evolution/test"], "done")}, doc
    printed = doc["ledger"][next(k for k in doc["ledger"] if k.startswith("evolution/test@"))]["result"]["printed"]
    assert "held-out benchmarks" in printed and "acebench" in printed   # the paper's Table 1 for the run
    (cell,) = doc["ledger"][next(k for k in doc["ledger"] if k.startswith("calibration/oracle@"))]["result"]["cells"]
    assert cell["grpo"]["step_generation_s"] > 0 and cell["grpo"]["step_update_s"] > 0
    assert "recipe GRPO" in (tmp_path / "out2" / "summary.md").read_text()
    with tarfile.open(tmp_path / "out2" / "cells.tar.gz") as tar:   # what comes back: records, no weights
        names = tar.getnames()
    assert any(n.startswith("runs/evolution-test/") for n in names) and "throughput.json" in names
    assert not any(n.endswith(".safetensors") for n in names)

    # a command stopped at its hard limit loses the unit in flight and says so; what was finished stays done
    ledger = state / "cache" / "gpu-plan.json"
    entries = json.loads(ledger.read_text())
    ledger.write_text(json.dumps({k: v for k, v in entries.items() if not k.startswith("throughput/")}))
    # 8 s: the command's set-up and the child's imports fit on a loaded machine (3 s did not, twice in three
    # suites), and the throughput unit, 11 s on its own here, cannot finish inside them
    stopped = _run("run", "--budget-s", "0", "--grace-s", "8", "--out", str(tmp_path / "out3"), "--state", str(state),
                   "--carry-from", str(arrived), "--model-wheel", "demo-model")
    assert stopped.returncode == 0, stopped.stderr
    doc = json.loads((tmp_path / "out3" / "summary.json").read_text())
    assert "stopped at the hard limit" in doc["note"] and doc["this_time"][-1] == {
        "unit": "throughput/tiny-random", "status": "stopped", "why": doc["note"]}
    assert sum(e["status"] == "done" for e in doc["ledger"].values()) == len(entries) - 1

    # a budget and grace of 0: a transfer only, nothing started
    moved = _run("run", "--budget-s", "0", "--out", str(tmp_path / "out4"), "--state", str(state),
                 "--carry-from", str(arrived), "--model-wheel", "demo-model")
    assert moved.returncode == 0 and "a transfer only" in json.loads((tmp_path / "out4" / "summary.json").read_text())["note"]


def test_units_that_need_the_model_wait_for_its_last_part(tmp_path):
    from gpu_plan import Plan, PlanConfig, execute

    plan = Plan(PlanConfig(profile="test", second_profile="test", wild={"test": "wild"}), tmp_path, tmp_path / "out",
                runtime=None, model_ready=False)
    throughput = next(u for u in plan.units() if u.step == "throughput")
    plan.record(throughput, {"status": "done", "seconds": 1.0})
    done = execute(plan, start_until=0.0, hard_stop=1e12, say=lambda text: None)
    assert {r["unit"]: r["status"] for r in done} == {throughput.id: "cached", **{
        u.id: "waiting" for u in plan.units() if u.needs_model}}


def test_a_run_without_a_carry_says_what_to_give(tmp_path):
    done = _run("run", "--budget-s", "10", "--out", str(tmp_path / "out"), "--state", str(tmp_path / "state"),
                "--carry-from", str(tmp_path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no carry has arrived" in done.stderr
