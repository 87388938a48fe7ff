"""No container or process outlives the host: a killed CLI's container is removed (SIGTERM at
once; SIGKILL: it ends within seconds by itself and the next command or executor start removes
it with the job folder), and a candidate exhausting inodes is stopped early."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from docker.errors import NotFound

from corpora import load_corpus
from sandbox.curate import CurationFailed, execute
from sandbox.docker_executor import OWNER_LABEL, DockerExecutor, docker_client, owner_id
from sandbox.executor import Limits
from corpora.stored import SPILL_PREFIX
from base.lifetime import release
from sandbox.leftovers import JOB_PREFIX, OWNER_FILE, claim, owner_gone, reap_job_dirs, reap_leftovers
from sandbox.process_executor import ProcessExecutor
from sandbox.strategy_files import strategy_files

from conftest import ROOT, SAMPLE_CORPUS

INODES = """
def curate(raw, ctx):
    i = 0
    while True:
        open(f"empty{i}", "w").close()
        i += 1
"""
SLEEPER = """
import time
def curate(raw, ctx):
    time.sleep(120)
"""


@pytest.fixture(scope="module")
def docker():
    client = docker_client()   # no skip: without an engine this fails with the fix
    assert DockerExecutor(client).image   # builds or finds the sandbox image
    return client


@pytest.mark.parametrize("sandbox", ["process", "docker"])
def test_empty_files_exhausting_inodes_are_stopped_by_the_file_count(strategy, tmp_path, sandbox, request):
    executor = ProcessExecutor() if sandbox == "process" else DockerExecutor(request.getfixturevalue("docker"))
    started = time.monotonic()
    with pytest.raises(CurationFailed, match=r"output directory holds more than 64 files; killed"):
        execute(strategy_files(strategy(INODES)), load_corpus([str(SAMPLE_CORPUS)]), tmp_path / "out",
                executor=executor, limits=Limits(timeout_s=60))
    assert time.monotonic() - started < 30, "stopped by the watchdog, not by the timeout"


def _listed(client, label: str) -> list:
    """The containers with `label`, as the engine lists them now: one removed between the list and
    its inspection (another command reaping a dead host's container) is left out, not an error."""
    import docker.errors

    found = []
    for row in client.api.containers(all=True, filters={"label": label}):
        try:
            found.append(client.containers.get(row["Id"]))
        except docker.errors.NotFound:
            pass
    return found


def _containers_of(client, pid: int) -> list:
    owner = owner_id(pid)
    return [] if owner is None else _listed(client, f"{OWNER_LABEL}={owner}")


def _curate_in_a_child(strategy_dir, out, client):
    tmp = Path(out).parent / "child-tmp"   # the child's TMPDIR: a job folder it cannot remove (SIGKILL) stays
    tmp.mkdir(exist_ok=True)                # here, not where every later command would reap it and say so
    child = subprocess.Popen([sys.executable, "-m", "evolver.cli", "curate", "--strategy", str(strategy_dir),
                              "--corpus", str(SAMPLE_CORPUS), "--out", str(out), "--sandbox", "docker", "--quiet"],
                             cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = _containers_of(client, child.pid)
        if running:
            return child, running[0].labels[OWNER_LABEL]
        assert child.poll() is None, child.stderr.read().decode()
        time.sleep(0.3)
    child.kill()
    raise AssertionError("the child started no container within 120 s")


def _labelled(client, owner: str) -> list:
    return _listed(client, f"{OWNER_LABEL}={owner}")


def _gone_within(client, owner: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _labelled(client, owner) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _labelled(client, owner)


def test_sigterm_of_the_host_cli_removes_its_container_at_once(docker, strategy, tmp_path):
    child, owner = _curate_in_a_child(strategy(SLEEPER), tmp_path / "out", docker)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 128 + signal.SIGTERM
    assert _gone_within(docker, owner, 5), "the container outlived its SIGTERMed owner"
    assert not (tmp_path / "out").exists()


def test_sigkill_of_the_host_cli_leaves_its_container_to_the_next_executor_start(docker, strategy, tmp_path):
    child, owner = _curate_in_a_child(strategy(SLEEPER), tmp_path / "out", docker)
    os.kill(child.pid, signal.SIGKILL)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)   # a zombie: no other command reaps its container yet
    assert _labelled(docker, owner), "nothing can clean up inside a SIGKILLed process"
    child.wait(timeout=30)
    executor = DockerExecutor(docker)   # the next curate / run / resume
    assert executor.reaped >= 1
    assert _gone_within(docker, owner, 5)


def test_a_sigkilled_hosts_container_ends_within_seconds_and_the_next_command_reaps_it(docker, strategy, tmp_path,
                                                                                      monkeypatch):
    """Nobody is left to read a dead host's candidate: its container ends within seconds (the
    engine closes the stdin the host held attached; the container's init exits on it), long before
    its deadline, and the next curateevo command removes the container and the job folder, both
    marked with the dead owner, saying so in one line."""
    tmp = tmp_path / "tmp"   # the children's TMPDIR: their job folders, apart from everyone else's
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    timeout_s = 300
    child = subprocess.Popen([sys.executable, "-m", "evolver.cli", "curate", "--strategy", str(strategy(SLEEPER)),
                              "--corpus", str(SAMPLE_CORPUS), "--out", str(tmp_path / "out"), "--sandbox", "docker",
                              "--timeout", str(timeout_s), "--quiet"],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120

    def running():   # created is not enough: a host killed between create and start leaves it never started
        found = _containers_of(docker, child.pid)
        return found if found and found[0].status == "running" else None

    while not running() and time.monotonic() < deadline:
        assert child.poll() is None, child.stderr.read().decode()
        time.sleep(0.2)
    (container,) = _containers_of(docker, child.pid)
    owner = container.labels[OWNER_LABEL]
    (job,) = tmp.glob(JOB_PREFIX + "*")
    assert (job / OWNER_FILE).read_text() == owner
    time.sleep(2)   # the strategy is sleeping inside: the candidate is under way
    container.reload()
    assert container.status == "running"
    os.kill(child.pid, signal.SIGKILL)
    # Dead but not yet waited for: a zombie keeps its pid and start time, so its owner id still
    # names a process and no other command (a pytest worker beside this one) reaps its leftovers
    # before the one under test.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    killed = time.monotonic()
    while time.monotonic() - killed < 20:   # seconds, with slack for a loaded machine; its deadline is 5 min
        container.reload()
        if container.status != "running":
            break
        time.sleep(0.2)
    container.reload()
    assert container.status == "exited", f"the container still runs {time.monotonic() - killed:.0f} s after its host died"
    assert container.attrs["State"]["ExitCode"] == 137
    assert job.exists(), "nothing cleans up inside a SIGKILLed process"
    assert not owner_gone(owner) and _labelled(docker, owner)   # the zombie holds them

    child.wait(timeout=30)   # now its owner is gone; the next command starts at once
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    # the loaded corpus's records and its staged copy (corpora.stored) are two folders of their own
    assert reap_leftovers() == ("removed 1 container(s), 1 job folder(s) and 2 corpus record folder(s) left by a "
                                "curateevo process that was killed")
    assert not _labelled(docker, owner) and not job.exists() and not list(tmp.glob(SPILL_PREFIX + "*"))


def test_every_command_removes_what_a_killed_one_left_and_says_so(tmp_path):
    """The line comes first from any curateevo command (here `status` of no run)."""
    tmp = tmp_path / "tmp"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner = owner_id(dead.pid)
    dead.wait()
    left = tmp / f"{JOB_PREFIX}left"
    left.mkdir(parents=True)
    (left / OWNER_FILE).write_text(dead_owner)
    after = subprocess.run([sys.executable, "-m", "evolver.cli", "status", str(tmp_path / "no-run")], cwd=ROOT,
                           env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120)
    # the container count is whatever killed hosts of other tests left meanwhile
    assert re.match(r"curateevo: removed (\d+ training process\(es\)(, | and ))?(\d+ container\(s\) and )?"
                    r"1 job folder\(s\) left by a curateevo process "
                    r"that was killed\n", after.stderr), after.stderr
    assert not left.exists()


def test_the_container_init_outlives_no_host_and_no_candidate_can_stop_it(docker, strategy, tmp_path):
    """A candidate cannot keep its container alive past its host: it cannot stop, kill or trace
    the init (PID 1, non-dumpable) that watches the host's lifeline."""
    hostile = strategy("""
        import os, signal, time
        def curate(raw, ctx):
            for sig in (signal.SIGSTOP, signal.SIGKILL, signal.SIGTERM):
                try:
                    os.kill(1, sig)
                except OSError:
                    pass
            try:
                os.open("/proc/1/fd/0", os.O_RDONLY)
                raise SystemExit("opened the init's stdin")
            except PermissionError:
                pass
            time.sleep(120)
    """)
    child, owner = _curate_in_a_child(hostile, tmp_path / "out", docker)
    time.sleep(3)   # the signals are sent
    (container,) = _labelled(docker, owner)
    container.reload()
    assert container.status == "running", "the init ignored the candidate's signals"
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    killed = time.monotonic()
    while time.monotonic() - killed < 20:
        try:
            container.reload()
        except NotFound:   # already gone: a parallel test worker's sandbox reaps dead owners' containers (leftovers.reap_orphans)
            return
        if container.status != "running":
            break
        time.sleep(0.2)
    assert container.status == "exited", "the container outlived its host"
    container.remove(force=True)


def test_leftovers_of_a_live_owner_or_without_a_mark_stay(tmp_path):
    live, dead, unmarked = (tmp_path / f"{JOB_PREFIX}{name}" for name in ("live", "dead", "unmarked"))
    for folder in (live, dead, unmarked):
        folder.mkdir()
    claim(live)
    sleeper = subprocess.Popen(["sleep", "60"])
    (dead / OWNER_FILE).write_text(owner_id(sleeper.pid))
    sleeper.kill()
    sleeper.wait()
    assert reap_job_dirs(tmp_path) == 1
    assert live.exists() and unmarked.exists() and not dead.exists()


def test_a_killed_commands_temporary_folders_are_removed_by_the_next_one_and_no_other(tmp_path):
    """A Ray task's stage, a replay's output, a code agent's checkout (base.lifetime's owned
    temporary folders) of a process killed with SIGKILL: the next command removes them and says so;
    a live process's, an unmarked one and a released one (a replay kept for the user) stay."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time
        from base.lifetime import owned_temporary_directory, owned_temporary_folder
        with owned_temporary_directory("stage") as stage:
            print(stage, owned_temporary_folder("replay"), flush=True)
            time.sleep(120)
    """)], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE, text=True)
    stage, replayed = map(Path, child.stdout.readline().split())
    assert stage.parent == tmp and stage.name.startswith("curateevo-stage-") and (stage / OWNER_FILE).is_file()
    mine, unmarked, kept = (tmp / f"curateevo-{what}-x" for what in ("agent", "stage", "replay"))
    for folder in (mine, unmarked, kept):
        folder.mkdir()
    claim(mine)
    (kept / OWNER_FILE).write_text(stage.joinpath(OWNER_FILE).read_text())   # the dead child's, then released
    release(kept)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    assert stage.is_dir() and replayed.is_dir(), "nothing cleans up inside a SIGKILLed process"
    after = subprocess.run([sys.executable, "-m", "evolver.cli", "status", str(tmp_path / "no-run")], cwd=ROOT,
                           env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120)
    # the container and process counts are whatever killed hosts of other tests left meanwhile
    assert re.match(r"curateevo: removed (\d+ training process\(es\)(, | and ))?(\d+ container\(s\) and )?"
                    r"2 temporary folder\(s\) left by a curateevo process that was killed\n", after.stderr), after.stderr
    assert not stage.exists() and not replayed.exists()
    assert mine.is_dir() and unmarked.is_dir() and kept.is_dir()


def test_no_product_module_makes_an_unmarked_curateevo_folder_in_the_temporary_directory():
    """Every `curateevo-*` folder in $TMPDIR goes through base.lifetime's owned temporary folders,
    so a killed process's is removed by the next command (the sandbox's own dry run, inside the
    container, makes a `dry-run-*` folder there, gone with the container)."""
    made = re.compile(r"(TemporaryDirectory|mkdtemp)\([^)]*prefix=f?[\"']curateevo-")
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(ROOT.glob("*/**/*.py"))
             if path.parts[len(ROOT.parts)] not in ("tests", "bench", ".venv") and path.name != "lifetime.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if made.search(line)]
    assert not found, found
