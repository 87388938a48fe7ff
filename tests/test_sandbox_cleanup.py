"""No container or process outlives the host: a killed CLI's container is removed (SIGTERM at
once, SIGKILL at the next executor start), and a candidate exhausting inodes is stopped early."""
import os
import signal
import subprocess
import sys
import time

import pytest

from sandbox.corpus import load_corpus
from sandbox.curate import CurationFailed, execute
from sandbox.docker_executor import OWNER_LABEL, DockerExecutor, docker_client, owner_id
from sandbox.executor import Limits
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


def _containers_of(client, pid: int) -> list:
    owner = owner_id(pid)
    return [c for c in client.containers.list(all=True, filters={"label": OWNER_LABEL})
            if owner is not None and c.labels.get(OWNER_LABEL) == owner]


def _curate_in_a_child(strategy_dir, out, client):
    child = subprocess.Popen([sys.executable, "-m", "evolver.cli", "curate", "--strategy", str(strategy_dir),
                              "--corpus", str(SAMPLE_CORPUS), "--out", str(out), "--sandbox", "docker", "--quiet"],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
    return client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={owner}"})


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
    child.wait(timeout=30)
    assert _labelled(docker, owner), "nothing can clean up inside a SIGKILLed process"
    executor = DockerExecutor(docker)   # the next curate / run / resume
    assert executor.reaped >= 1
    assert _gone_within(docker, owner, 5)
