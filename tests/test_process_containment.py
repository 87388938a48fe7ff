"""Hostile strategies against the process executor: with bubblewrap they read no secret of the
host, write nothing of the project, and leave no process behind; without it, only the user's own
strategy runs (a generated candidate is refused in one sentence)."""
import functools
import json
import os
import sys
import time
from pathlib import Path
from textwrap import dedent

import pytest

from evolver.errors import RunFailed
from sandbox import process_executor
from sandbox.curate import curate
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
    result = curate(strategy_dir, [SAMPLE_CORPUS], tmp_path / "out", executor=executor or ProcessExecutor())
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


def test_without_bubblewrap_a_generated_candidate_is_refused_and_the_users_own_runs(strategy, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")   # no bwrap on this PATH
    probe_bwrap.cache_clear()
    try:
        with pytest.raises(RunFailed) as refused:
            ProcessExecutor()
        message = str(refused.value)
        assert message.startswith("the process sandbox cannot contain a generated candidate here (bubblewrap (bwrap) "
                                  "is not installed): install bubblewrap") and "\n" not in message
        s = strategy(HOSTILE + "def curate(raw, ctx):\n    return report(honest(raw), ok='yes')\n")
        executor = ProcessExecutor(trusted=True)
        assert "not isolated" in executor.describe()["filesystem"]
        assert verdicts(s, tmp_path, executor)["ok"] == "yes"
    finally:
        monkeypatch.undo()
        probe_bwrap.cache_clear()
    assert process_executor.probe_bwrap() is None, "bwrap is found again on the real PATH"
