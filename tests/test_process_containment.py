"""Hostile strategies against the process executor: with bubblewrap they read no secret of the
host, write nothing of the project, and leave no process behind; without it, no strategy runs,
the user's own included (refused in one sentence)."""
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from textwrap import dedent

import pytest

from base.errors import RunFailed
from sandbox import process_executor
from conftest import curate_files
from sandbox.executor import CurationJob
from sandbox.mount_table import writable_mounts
from sandbox.process_executor import ProcessExecutor, probe_bwrap

from conftest import ROOT, SAMPLE_CORPUS

CANARY = "sk-host-secret-canary-4242"
DAEMON_MARK = "31337.25"   # sleep's argument: how the host finds a daemon that cleared its environment

def needs_bwrap(test):
    """The project installs bubblewrap (scripts/docker-engine.sh): without it these tests fail, never skip."""
    @functools.wraps(test)
    def checked(*args, **kwargs):
        why = probe_bwrap()
        assert why is None, f"bubblewrap cannot run here ({why}); scripts/docker-engine.sh installs it"
        return test(*args, **kwargs)
    return checked


def verdicts(strategy_dir, tmp_path, executor=None) -> dict:
    result = curate_files(strategy_dir, [SAMPLE_CORPUS], tmp_path / "out", executor=executor or ProcessExecutor())
    rows = [json.loads(line) for line in (result.out_dir / "memory.jsonl").read_text().splitlines()]
    return {row["key"]: row["content"] for row in rows}


HOSTILE = """
import os, glob
def report(out, **found):
    out["memory"] = [{"id": k, "key": k, "content": str(v) or "-"} for k, v in found.items()]
    return out
"""


@needs_bwrap
def test_a_strategy_reads_no_api_key_from_any_visible_process(strategy, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    s = strategy(HOSTILE + dedent("""
        def curate(raw, ctx):
            seen = []
            for path in ["/proc/1/environ", f"/proc/{os.getppid()}/environ", *glob.glob("/proc/[0-9]*/environ")]:
                try:
                    seen.append(open(path, "rb").read().decode(errors="replace"))
                except OSError as exc:
                    seen.append(type(exc).__name__)
            return report(honest(raw), environ=" ".join(seen), pids=sorted(glob.glob("/proc/[0-9]*")),
                          env=" ".join(f"{k}={v}" for k, v in os.environ.items()))
    """))
    found = verdicts(s, tmp_path)
    assert CANARY not in json.dumps(found)
    assert len(json.loads(found["pids"].replace("'", '"'))) <= 4, "a fresh PID namespace shows only the job"


@needs_bwrap
def test_a_strategy_cannot_write_into_the_project_or_the_host(strategy, tmp_path):
    toolkit = ROOT / "curation_strategies" / "toolkit" / "__init__.py"
    before = toolkit.read_bytes()
    outside = tmp_path / "outside.txt"
    s = strategy(HOSTILE + dedent(f"""
        def attempt(path):
            try:
                with open(path, "a") as f:
                    f.write("# owned\\n")
                return "wrote"
            except OSError as exc:
                return type(exc).__name__
        def curate(raw, ctx):
            import curation_strategies.toolkit as tk
            return report(honest(raw), toolkit=attempt(tk.__file__), project=attempt({str(ROOT / "owned.py")!r}),
                          host=attempt({str(outside)!r}), home=sorted(os.listdir("/root")))
    """))
    found = verdicts(s, tmp_path)
    assert found["toolkit"] in ("OSError", "PermissionError") and found["project"] != "wrote"
    # /root is an empty tmpfs but for the interpreter bound back (pyenv lives there on some machines)
    interpreter = sorted({Path(p).parts[2] for p in (sys.base_prefix, sys.prefix) if p.startswith("/root/")})
    assert found["host"] != "wrote" and found["home"] == (str(interpreter) if interpreter else "-")
    assert toolkit.read_bytes() == before and not (ROOT / "owned.py").exists() and not outside.exists()


def _daemons() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and DAEMON_MARK.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@needs_bwrap
def test_a_double_forked_daemon_without_the_jobs_marker_dies_with_the_job(strategy, tmp_path):
    s = strategy(HOSTILE + dedent(f"""
        def curate(raw, ctx):
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execve("/bin/sleep", ["sleep", "{DAEMON_MARK}"], {{}})   # no marker in its environment
                os._exit(0)
            os.wait()
            return report(honest(raw), forked="yes")
    """))
    assert verdicts(s, tmp_path)["forked"] == "yes"
    deadline = time.monotonic() + 5
    while _daemons() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _daemons()
    for pid in left:
        os.kill(pid, 9)
    assert left == []


def test_without_bubblewrap_every_strategy_is_refused_the_users_own_too(strategy, tmp_path, monkeypatch, capsys):
    from evolver import cli

    monkeypatch.setenv("PATH", "/nonexistent")   # no bwrap on this PATH
    probe_bwrap.cache_clear()
    try:
        for trusted in (False, True):
            with pytest.raises(RunFailed) as refused:
                ProcessExecutor(trusted=trusted)
            message = str(refused.value)
            assert message.startswith("the process sandbox cannot contain a strategy here (bubblewrap (bwrap) "
                                      "is not installed): install bubblewrap") and "\n" not in message
        s = strategy(HOSTILE + "def curate(raw, ctx):\n    return report(honest(raw), ok='yes')\n")
        assert cli.main(["curate", "--strategy", str(s), "--corpus", str(SAMPLE_CORPUS), "--out", str(tmp_path / "out"),
                         "--sandbox", "process", "--quiet"]) == 1
        err = capsys.readouterr().err
        assert "the process sandbox cannot contain a strategy here" in err and err.count("\n") == 1
        assert not (tmp_path / "out").exists()
    finally:
        monkeypatch.undo()
        probe_bwrap.cache_clear()
    assert process_executor.probe_bwrap() is None, "bwrap is found again on the real PATH"


@pytest.fixture
def host_dir():
    """A host folder the sandbox sees (read-only) at the same path: /tmp and the homes are hidden there."""
    folder = Path(tempfile.mkdtemp(prefix="curateevo-host-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_bwrap
def test_no_spelling_of_a_host_path_through_proc_is_writable(strategy, tmp_path, host_dir):
    target = host_dir / "target.txt"
    target.write_text("original\n")
    sysctl = "/proc/sys/vm/swappiness"   # written back with its own value: nothing changes even if it passed
    s = strategy(HOSTILE + dedent(f"""
        def attempt(path, data="# owned\\n"):
            try:
                with open(path, "r+" if path.startswith("/proc/sys/") else "a") as f:
                    f.write(data if not path.startswith("/proc/sys/") else f.read())
                return "wrote"
            except OSError as exc:
                return type(exc).__name__
        def curate(raw, ctx):
            target = {str(target)!r}
            spellings = [target, "/proc/self/root" + target, "/proc/thread-self/root" + target,
                         "/proc/1/root" + target, f"/proc/{{os.getppid()}}/root" + target,
                         "/proc/self/cwd/../../../.." + target, "/proc/1/cwd/../../../.." + target]
            spellings += [p + "/root" + target for p in glob.glob("/proc/[0-9]*")]
            spellings += [f"/proc/self/fd/{{fd}}/../../..{{target}}" for fd in range(3)]
            found = {{f"path{{i}}": attempt(p) for i, p in enumerate(spellings)}}
            return report(honest(raw), sysctl=attempt({sysctl!r}), **found)
    """))
    found = verdicts(s, tmp_path)
    assert "wrote" not in found.values(), found
    assert target.read_text() == "original\n"


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the host mounts a tmpfs while the candidate runs (root only)")
def test_a_mount_the_host_makes_while_the_candidate_runs_is_not_writable_inside(strategy, tmp_path, host_dir):
    shared = host_dir / "shared"   # a shared mount, as Docker makes /var/lib/docker: mounts below it propagate
    shared.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(shared)], check=True)
    subprocess.run(["mount", "--make-shared", str(shared)], check=True)
    mount_point = shared / "mnt"   # where the host mounts a writable tmpfs (a new container's overlay) later
    mount_point.mkdir()
    s = strategy(HOSTILE + dedent(f"""
        import subprocess, time
        def curate(raw, ctx):
            marker = subprocess.Popen(["sleep", "{DAEMON_MARK}"])   # the host sees it: the candidate runs
            ready = {str(mount_point / "ready")!r}
            before = os.path.exists(ready)
            deadline = time.monotonic() + 60   # the host kills the marker once it has mounted
            while not os.path.exists(ready) and marker.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            marker.kill()
            try:
                with open({str(mount_point / "owned")!r}, "w") as f:
                    f.write("owned")
                wrote = "wrote"
            except OSError as exc:
                wrote = type(exc).__name__
            return report(honest(raw), before=before, seen=os.path.exists(ready), wrote=wrote)
    """))
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(verdicts(s, tmp_path)))
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while not _daemons() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _daemons(), "the candidate did not start"
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs", str(mount_point)], check=True)
        (mount_point / "ready").write_text("")
        for pid in _daemons():   # the go signal the candidate can see: its marker process ends
            os.kill(pid, signal.SIGKILL)
        worker.join(timeout=120)
        assert not (mount_point / "owned").exists()
    finally:
        worker.join(timeout=120)
        subprocess.run(["umount", str(mount_point)])
        subprocess.run(["umount", str(shared)])
    assert result["before"] == "False", "the mount was made after the candidate started"
    assert result["wrote"] != "wrote" and result["seen"] == "False", result   # the host's new mount never shows


@needs_bwrap
def test_the_probe_refuses_a_sandbox_whose_mounts_leak():
    """The mount-table check is what makes the executor refuse: bwrap's plain sandbox (the
    host's propagation, a writable /proc) fails it, the executor's passes."""
    with tempfile.TemporaryDirectory() as tmp:
        job = CurationJob(Path(tmp) / "s", Path(tmp) / "c", Path(tmp) / "o", 0)
        job.strategy_dir.mkdir()
        job.corpus_path.touch()
        job.out_dir.mkdir()
        argv = process_executor.bwrap_argv(job)
        assert argv[-3:] == ["--remount-ro", "/proc", "--"]
        plain = argv[:-3] + ["--"]
        table = lambda cmd, pre: subprocess.run(cmd + ["/bin/cat", "/proc/self/mountinfo"], capture_output=True,
                                                text=True, check=True, preexec_fn=pre).stdout
        leaks = writable_mounts(table(plain, None), {str(job.out_dir)})
        assert "/proc" in leaks and any(p.startswith("/") for p in leaks)
        assert writable_mounts(table(argv, process_executor._private_mounts), {str(job.out_dir)}) == []
