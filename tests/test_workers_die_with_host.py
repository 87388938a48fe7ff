"""A killed host leaves nothing running: the training forkserver and the children forked from it
die with the process that started them, even by SIGKILL (base.lifetime, trainer.warm_server), and
the next curateevo command kills any training process whose owner is gone, and says so."""
import os
import signal
import subprocess
import sys
import textwrap
import time

from sandbox.leftovers import OWNER_ENV, owner_id, process_owner, reap_leftovers

from conftest import ROOT

HOST = textwrap.dedent("""
    import os, sys, time
    if __name__ == "__main__":   # the forkserver's children import the main module again
        from trainer import warm
        from trainer.train import child_env
        os.mkfifo(sys.argv[1])   # the worker opens its request and waits there for a writer that never comes
        child = warm.start(sys.argv[1], child_env(), os.getcwd())
        helper = os.fork()   # a process forked afterwards, as a run forks helpers: it holds the forkserver's
        if helper == 0:      # `alive` pipe open past the host's death (multiprocessing's own exit signal)
            time.sleep(30)
            os._exit(0)
        print(child.pid, helper, flush=True)
        time.sleep(600)
""")


def _marked(owner: str) -> list[int]:
    """The live processes whose environment names `owner` as theirs."""
    assert owner, "a process without an owner id"
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    return [p for p in pids if process_owner(p) == owner and not _zombie(p)]


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_sigkilled_host_leaves_no_training_worker_running(tmp_path):
    host_file = tmp_path / "host.py"
    host_file.write_text(HOST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "CURATEEVO_WARM_TRAINING": "1"}
    host = subprocess.Popen([sys.executable, str(host_file), str(tmp_path / "request")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line, owner = "", owner_id(host.pid)
    try:
        line = host.stdout.readline()   # the forkserver imports torch & co. first: tens of seconds
        assert line, host.stderr.read()
        child, helper = map(int, line.split())
        deadline = time.monotonic() + 60
        while len(_marked(owner)) < 2 and time.monotonic() < deadline:   # the forkserver and its child
            time.sleep(0.2)
        workers = _marked(owner)
        assert child in workers and len(workers) >= 2, workers
        server = _parent(child)   # the forkserver
        host.kill()
        host.wait()
        gone = time.monotonic()
        while {server, child} & set(_marked(owner)) and time.monotonic() - gone < 10:
            time.sleep(0.2)
        left = {server, child} & set(_marked(owner))
        assert not left, f"{sorted(left)} still running {time.monotonic() - gone:.0f} s after the host was killed"
        # multiprocessing's resource tracker ends when the last holder of its pipe (the helper) does; the next command
        said = reap_leftovers()   # kills whatever of the host's is still there
        assert not _marked(owner), said
    finally:
        host.kill()
        for pid in ([helper] if line else []) + _marked(owner):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_next_command_kills_a_training_process_whose_host_is_gone_and_says_so():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner = owner_id(dead.pid)
    dead.wait()
    escaped = subprocess.Popen(["sleep", "120"], env={**os.environ, OWNER_ENV: dead_owner})
    alive = subprocess.Popen(["sleep", "120"], env={**os.environ, OWNER_ENV: owner_id()})   # its owner lives
    try:
        said = reap_leftovers()
        assert said is not None and said.startswith("removed 1 training process(es)"), said
        assert said.endswith("left by a curateevo process that was killed")
        assert escaped.wait(timeout=10) == -signal.SIGKILL
        assert alive.poll() is None
    finally:
        for p in (escaped, alive):
            p.kill()
            p.wait()
