"""`run --backend ray` on a real two-node Ray cluster on this machine (a head and a worker started
as separate `ray start` processes, two CPUs each): the same decisions, artifacts, adapters,
trajectories and journal as `--backend local`, also when the worker node is killed during a
training (Ray retries the task) and when the driver is killed (`resume` submits only what is not
done); a batch's folders through `--storage` on both nodes. One cluster for the module, and one
`--backend local` reference run for both comparisons, started with the module's first test so that
it runs beside the short tests; the two fault tests come last (its result is awaited only when compared)."""
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from evolver.store import RunStore

from conftest import ROOT, SAMPLE_CORPUS, TINY_RUN_ARGS

try:
    import ray  # noqa: F401
except ImportError:   # never a skip: requirements.lock holds Ray, so CI's `bash scripts/setup.sh` installs it
    ray = None


@pytest.fixture(autouse=True, scope="module")
def ray_installed():
    if ray is None:
        pytest.fail("Ray is not installed in this environment, but requirements.lock holds it (the ray extra): "
                    "bash scripts/setup.sh installs it", pytrace=False)

pytestmark = pytest.mark.timeout(3600)   # four tiny evolution runs and a cluster

ARGS = ["--profile", "test", "--base", "tiny-random", "--epochs", "1", "--seeds", "2",
        "--tasks", "2", "--sandbox", "process", "--benchmark", "bfcl-single", "--corpus", str(SAMPLE_CORPUS),
        "--margin", "0.001", "--batch-size", "2", "--ablate", "no-rl", *TINY_RUN_ARGS]
"""One epoch, two seeds: two trainings (and their evaluations) submitted at once, so one can land on
the worker node while the other runs on the head. The trainings are SFT only (`--ablate no-rl`: the
local run took 36.5 s instead of 57.9 s, and the backend moves a GRPO stage no differently). The
cluster runs every StageJob alike, whatever
its kind; a second epoch and the proposal's proxy jobs (`--candidates 2`) on the cluster, compared
with the local run byte for byte, are bench/ray_backend.py's run (the proxies on the local backend:
tests/test_loop_seams.py)."""
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
       # the GCS declares a killed node dead after 2 missed 1-second health checks (Ray's default: 5 of 3 s),
       # so the lost training is retried seconds after the kill, not a quarter of a minute
       "RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
       "RAY_health_check_failure_threshold": "2"}
RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive_nodes(address: str) -> list[str]:
    code = ("import ray; ray.init(address=%r, logging_level='ERROR'); "
            "print(' '.join(n['NodeID'] for n in ray.nodes() if n['Alive']))" % address)
    try:
        done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:   # no head answers (yet): the caller checks its process and deadline
        return []
    return done.stdout.split() if done.returncode == 0 else []


class Cluster:
    def __init__(self, tmp: Path):
        self.port, self.tmp, self.procs, self.worker = free_port(), tmp, {}, None
        self.address = f"127.0.0.1:{self.port}"

    def start(self, name: str, *args: str, nodes: int) -> set[str]:
        """Start a node; the alive nodes once there are `nodes`."""
        log = open(self.tmp / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen([RAY, "start", "--node-ip-address", "127.0.0.1", "--num-cpus", "2",
                                             "--disable-usage-stats", "--block", *args], env=ENV, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 600
        while len(alive := set(alive_nodes(self.address))) < nodes:
            assert self.procs[name].poll() is None, (self.tmp / f"{name}.log").read_text()[-2000:]
            assert time.monotonic() < deadline, f"the Ray {name} did not come up"
            time.sleep(3)
        return alive

    def start_worker(self) -> str:
        before = set(alive_nodes(self.address))
        self.worker = (self.start("worker", "--address", self.address, nodes=len(before) + 1) - before).pop()
        return self.worker

    def two_nodes(self) -> None:
        """The head and a worker (started only when none runs: each start costs a minute on a loaded machine)."""
        if "worker" not in self.procs:
            self.start_worker()

    def head_alone(self) -> None:
        if "worker" in self.procs:
            self.kill("worker")

    def kill(self, name: str) -> None:
        """The node's processes (raylet, its workers) die at once, as on a lost machine."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The head; a test that needs the worker too starts it (`two_nodes`)."""
    tmp = Path(tmp_path_factory.mktemp("ray"))
    # Ray's sockets live in the session folder and a socket path may not pass 107 bytes: pytest's
    # folders (a worker's popen-gwN/ included) come close, so the session gets a short one of its own.
    session = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    c = Cluster(tmp)
    c.start("head", "--head", "--port", str(c.port), "--include-dashboard", "false", "--temp-dir",
            str(session), nodes=1)
    yield c
    for name in list(c.procs):
        c.kill(name)
    shutil.rmtree(session, ignore_errors=True)


def run(*argv: str, log: Path) -> subprocess.Popen:
    """`curateevo ARGV` in its own session, its console into `log` (a file: a pipe nobody reads
    while the test waits would fill up and stall the run)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "evolver.cli", *argv], env=ENV, cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    proc.log = log
    return proc


def console(proc: subprocess.Popen) -> str:
    return proc.log.read_bytes().decode(errors="replace")


def finish(proc: subprocess.Popen) -> str:
    proc.wait(timeout=3000)
    out = console(proc)
    assert proc.returncode == 0, out[-3000:]
    return out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fingerprint(root: Path, journal: bool = True) -> dict:
    """What no backend, completion order or kill may change."""
    store = RunStore.open(root)
    events = store.journal.events()
    done = [e for e in events if e.is_done()]
    print_ = {
        "decisions": [{k: e.result.get(k) for k in ("epoch", "accepted", "P", "C", "J", "commit", "edits")}
                      for e in done if e.stage == "decide"],
        "final": [e.result for e in done if e.stage == "final"],
        "proposals": [{k: e.result.get(k) for k in ("candidate", "edits", "candidates", "chosen")}
                      for e in done if e.stage == "propose"],
        "scores": [(e.epoch, e.stage, e.result["P"]) for e in done if e.stage.startswith("evaluate")],
        "files": {str(p.relative_to(root)): sha(p) for pattern in
                  ("epochs/*/artifacts/*", "epochs/*/train-s*/adapter/adapter_model.safetensors",
                   "epochs/*/eval-s*/trajectories.jsonl")
                  for p in sorted(root.glob(pattern)) if p.is_file() and p.name != "execution.json"},
    }
    if journal:   # the order of the journal's events, uninterrupted runs only
        print_["journal"] = [(e.kind, e.epoch, e.stage) for e in events if e.stage is not None]
    return print_


class Reference:
    """The `--backend local` run both comparisons use: started once, awaited when first compared."""

    def __init__(self, runs: Path):
        self.t0, self.root, self.checked = time.monotonic(), runs / "local", False
        self.proc = run("run", *ARGS, "--runs-dir", str(runs), "--name", "local", log=runs / "local.log")

    def fingerprint(self, journal: bool = True) -> dict:
        if not self.checked:
            finish(self.proc)
            print(f"\nlocal run: ended {time.monotonic() - self.t0:.0f} s after the module started it")
            made = fingerprint(self.root)
            assert len(made["decisions"]) >= 1 and made["files"]
            self.checked = True
        return fingerprint(self.root, journal)


@pytest.fixture(scope="module", autouse=True)
def local(tmp_path_factory):
    """Started with the module's first test, so it runs beside the short tests and is done before
    the two fault tests (last in the module) compare with it."""
    reference = Reference(tmp_path_factory.mktemp("local"))
    yield reference
    if reference.proc.poll() is None:   # a test failed before comparing: the run is not left behind
        os.killpg(reference.proc.pid, signal.SIGKILL)
        reference.proc.wait()


def wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = 2400):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended before {what}: " + console(proc)[-2000:]
        found = predicate()
        if found:
            return found
        time.sleep(1)
    pytest.fail(f"never saw {what}")


def training_on(root: Path, node: str | None = None):
    try:
        rows = json.loads((root / "stages.json").read_text())["stages"]
    except (OSError, ValueError, KeyError):
        return None
    return next((r for r in rows if r["stage"].startswith("train") and r["state"] == "running"
                 and (node is None or r["node"].endswith(node[:8]))), None)


STORAGE_DRIVER = """
import json, sys
from pathlib import Path
from evolver.backends import StageJob
from evolver.backends.ray_cluster import RayBackend
address, bucket, tmp = sys.argv[1], sys.argv[2], Path(sys.argv[3])
(tmp / "artifacts").mkdir(parents=True)
(tmp / "artifacts" / "sft.jsonl").write_text("one record")
make = "tests.test_backends:make"   # a stage that writes what it read
jobs = [StageJob("train-s0", make, {"name": "train", "artifacts": str(tmp / "artifacts")}, tmp / "train-s0",
                 ship=("artifacts",)),
        StageJob("evaluate-s0", make, {"name": "evaluate"}, tmp / "eval-s0", after={"adapter": ("train-s0", "made")})]
backend = RayBackend(address, storage=bucket)
backend.check_storage(backend.connect())   # every live node reads the driver's probe
batch = backend.submit(jobs)
print(json.dumps([batch.result("train-s0"), batch.result("evaluate-s0")]))
backend.close()
"""


def test_with_storage_a_batchs_folders_travel_through_the_uri_on_the_cluster(cluster, tmp_path):
    cluster.two_nodes()
    bucket, driver = tmp_path / "bucket", tmp_path / "driver"
    done = subprocess.run([sys.executable, "-c", STORAGE_DRIVER, cluster.address, str(bucket), str(driver)], env=ENV,
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    trained, evaluated = json.loads(done.stdout.splitlines()[-1])
    assert trained == {"made": str(driver / "train-s0" / "train.txt")}
    assert (driver / "train-s0" / "train.txt").read_text() == "train read None and one record"
    text = (driver / "eval-s0" / "evaluate.txt").read_text()   # the training's output, read from the storage
    assert evaluated == {"made": str(driver / "eval-s0" / "evaluate.txt")} and text.endswith("/after/adapter/train.txt")
    assert bucket.is_dir() and list(bucket.iterdir()) == []     # the batch's objects are gone once all landed


def test_a_cluster_without_the_gpus_a_profile_needs_is_one_sentence_before_any_work(cluster, tmp_path):
    code = ("import sys; from dataclasses import replace; from trainer import recipe; "
            "recipe.PROFILES['test'] = replace(recipe.PROFILES['test'], device='cuda'); "
            "from evolver import cli; sys.exit(cli.main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "run", *ARGS, "--backend", "ray", "--ray-address",
                           cluster.address, "--runs-dir", str(tmp_path), "--name", "gpu"], env=ENV, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    error = [line for line in done.stderr.splitlines() if line.startswith("curateevo: error")]
    assert len(error) == 1 and "0 GPU(s)" in error[0] and "per training" in error[0], done.stderr[-2000:]
    assert not (tmp_path / "gpu").exists()


def test_without_a_cluster_the_ray_backend_says_so_before_any_work(tmp_path):
    done = subprocess.run([sys.executable, "-m", "evolver.cli", "run", *ARGS, "--backend", "ray", "--ray-address",
                           f"127.0.0.1:{free_port()}", "--runs-dir", str(tmp_path), "--name", "none"], env=ENV,
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "no Ray cluster answers at 127.0.0.1:" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "none").exists()


def test_a_ray_run_is_the_local_run_even_when_a_worker_node_dies_during_a_training(local, cluster, tmp_path):
    # Both nodes share this machine's address, and a driver attaches to the raylet of either: one
    # attached to the worker's would die with it (LocalRayletDiedError, seen here). So the driver
    # starts while the head is alone, and the worker joins (and takes the queued training) after.
    cluster.head_alone()
    start = time.monotonic()
    proc = run("run", *ARGS, "--backend", "ray", "--ray-address", cluster.address, "--runs-dir", str(tmp_path),
               "--name", "ray", log=tmp_path / "ray.log")
    root = tmp_path / "ray"
    wait_for(lambda: training_on(root), proc, "a training on the head")
    cluster.start_worker()
    row = wait_for(lambda: training_on(root, cluster.worker), proc, "a training on the worker node")
    t0 = time.monotonic()
    cluster.kill("worker")                  # Ray runs the lost task again on the head
    out = finish(proc)
    print(f"\nray run: {time.monotonic() - start:.0f} s; the worker killed at {row['elapsed_s']:.0f} s into "
          f"{row['stage']}, the run ended {time.monotonic() - t0:.0f} s later")
    assert "in flight: " in out and row["node"] in out
    assert fingerprint(root) == local.fingerprint()


def test_a_killed_driver_resumes_what_is_not_done_and_status_shows_the_clusters_stages(local, cluster, tmp_path):
    """One seed (the reference's seed 0): a resume's promise is per stage, and a second training
    would double the test's time for no other stage kind."""
    cluster.head_alone()   # a worker would add nothing a resume depends on, and its start costs 10–20 s here
    args = [*ARGS]
    args[args.index("--seeds") + 1] = "1"
    proc = run("run", *args, "--backend", "ray", "--ray-address", cluster.address, "--runs-dir", str(tmp_path),
               "--name", "ray", log=tmp_path / "ray.log")
    root = tmp_path / "ray"
    wait_for(lambda: training_on(root), proc, "a training in flight")
    status = subprocess.run([sys.executable, "-m", "evolver.cli", "status", str(root)], env=ENV, cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert "running:" in status.stdout and "in flight: epoch 0 train-s0" in status.stdout, status.stdout
    os.killpg(proc.pid, signal.SIGKILL)   # the driver dies; its tasks die with it
    proc.wait()
    journaled = {(e.epoch, e.stage) for e in RunStore.open(root).journal.events() if e.is_done()}
    assert (0, "curate") in journaled and (0, "train-s0") not in journaled
    out = finish(run("resume", str(root), log=tmp_path / "resume.log"))
    for epoch, stage in journaled:        # what was done is not run again
        assert not re.search(rf"epoch {epoch} \([^)]*\) · {stage} …", out), (epoch, stage)
    assert "epoch 0 (1/1) · train-s0 done" in out
    resumed, reference = fingerprint(root, journal=False)["files"], local.fingerprint(journal=False)["files"]
    assert resumed and resumed == {k: v for k, v in reference.items() if "-s1/" not in k}   # the same bytes as seed 0's
