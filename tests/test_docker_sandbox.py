"""Hostile strategies in the Docker sandbox: each ends with a reason, the host and the corpus
untouched, no container or process left behind, and the caller alive."""
import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

from corpora import load_corpus
from sandbox.curate import CurationFailed, execute, make_executor
from sandbox.docker_executor import DockerExecutor, docker_client
from sandbox.executor import Limits
from workspace.repository import strategy_files


@pytest.fixture(scope="module")
def docker_executor():
    # No skip: without an engine this fails with the fix (scripts/setup.sh installs one).
    executor = DockerExecutor(docker_client())
    executor.image  # builds or finds the sandbox image
    return executor


@pytest.fixture
def corpus_copy(sample_corpus, tmp_path):
    path = tmp_path / "corpus.jsonl"
    shutil.copy(sample_corpus, path)
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(executor) -> list:
    assert executor.markers, "the executor made no container"
    return executor.leftovers()


def run(executor, strategy_dir, corpus, out, **limits):
    return execute(strategy_files(strategy_dir), load_corpus([str(corpus)]), out, executor=executor,
                   limits=Limits(**{"timeout_s": 60, **limits}))


def contained_failure(executor, strategy_dir, corpus, out, **limits) -> str:  # noqa: D401
    before = sha(corpus)
    with pytest.raises(CurationFailed) as info:
        run(executor, strategy_dir, corpus, out, **limits)
    assert sha(corpus) == before, "the corpus changed"
    assert not out.exists()
    assert leftovers(executor) == [], "a container was left behind"
    return info.value.reason


def test_honest_strategy_runs_and_replays_like_the_process_executor(docker_executor, strategy, corpus_copy, tmp_path):
    from sandbox.process_executor import ProcessExecutor

    s = strategy("""
        def curate(raw, ctx):
            return honest(raw)
    """)
    in_docker = run(docker_executor, s, corpus_copy, tmp_path / "docker")
    in_process = run(ProcessExecutor(), s, corpus_copy, tmp_path / "process")
    for name in ("sft.jsonl", "rl.jsonl", "memory.jsonl", "profile.json", "manifest.json"):
        assert (in_docker.out_dir / name).read_bytes() == (in_process.out_dir / name).read_bytes(), name
    assert in_docker.execution["execution"]["executor"] == "docker"
    assert leftovers(docker_executor) == []


def test_network_is_absent(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        import socket, os
        def curate(raw, ctx):
            ifaces = sorted(name for _, name in socket.if_nameindex())
            try:
                socket.create_connection(("1.1.1.1", 53), timeout=2)
                reached = True
            except OSError:
                reached = False
            raise RuntimeError(f"interfaces={ifaces} reached={reached}")
    """)
    reason = contained_failure(docker_executor, s, corpus_copy, tmp_path / "out")
    assert "interfaces=['lo'] reached=False" in reason


def test_host_environment_and_files_are_invisible(docker_executor, strategy, corpus_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-canary-42")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("canary")
    s = strategy(f"""
        import os
        def curate(raw, ctx):
            env = "ANTHROPIC" in repr(os.environ) or "canary" in repr(os.environ)
            seen = os.path.exists({str(secret)!r}) or os.path.exists("/work/main") or os.path.exists("/root/.pyenv")
            runs = os.listdir("/opt/curateevo")
            raise RuntimeError(f"env={{env}} host_files={{seen}} project={{sorted(runs)}}")
    """)
    reason = contained_failure(docker_executor, s, corpus_copy, tmp_path / "out")
    assert "env=False host_files=False project=['base', 'curation_strategies', 'sandbox']" in reason


def test_writes_outside_the_output_dir_fail_everywhere(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        import os
        def curate(raw, ctx):
            targets = ["/job/corpus.jsonl", "/job/strategy/strategy.py", "/job/strategy/new.py",
                       "/opt/curateevo/sandbox/runtime.py", "/opt/curateevo/evil.py", "/etc/passwd", "/usr/evil", "/evil"]
            written = []
            for t in targets:
                try:
                    with open(t, "a") as f:
                        f.write("owned")
                    written.append(t)
                except OSError:
                    pass
            raise RuntimeError(f"written={written}")
    """)
    runtime_before = sha(Path("sandbox/runtime.py"))
    reason = contained_failure(docker_executor, s, corpus_copy, tmp_path / "out")
    assert "written=[]" in reason
    assert sha(Path("sandbox/runtime.py")) == runtime_before


def test_fork_bomb_is_stopped_by_the_pids_limit(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        import os, time
        def curate(raw, ctx):
            children = 0
            try:
                while True:
                    if os.fork() == 0:
                        time.sleep(30)
                        os._exit(0)
                    children += 1
            except OSError:
                raise RuntimeError(f"fork refused after {children} children")
    """)
    reason = contained_failure(docker_executor, s, corpus_copy, tmp_path / "out", max_processes=32, timeout_s=40)
    assert "fork refused after" in reason


def test_unbounded_allocation_is_killed_by_the_memory_limit(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            hoard = []
            while True:
                hoard.append(bytearray(2**24))
    """)
    reason = contained_failure(docker_executor, s, corpus_copy, tmp_path / "out", memory_bytes=256 * 2**20)
    assert reason.startswith("killed for memory: the sandbox's cap is 0.25 GiB")


def test_endless_loop_is_killed_at_the_timeout(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            while True:
                pass
    """)
    t0 = time.monotonic()
    reason = contained_failure(docker_executor, s, corpus_copy, tmp_path / "out", timeout_s=4)
    assert "timed out after 4 s" in reason and time.monotonic() - t0 < 40


def test_printing_gigabytes_keeps_a_bounded_tail(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        import sys
        def curate(raw, ctx):
            block = "z" * 2**20
            for _ in range(1024):
                sys.stdout.write(block)
            raise RuntimeError("printed a gigabyte")
    """)
    with pytest.raises(CurationFailed) as info:
        run(docker_executor, s, corpus_copy, tmp_path / "out", output_bytes=8192, timeout_s=120)
    assert info.value.reason == "strategy failed: RuntimeError: printed a gigabyte"
    assert len(info.value.execution.stdout) < 20_000
    assert leftovers(docker_executor) == []


def test_stderr_survives_a_stdout_flood_written_after_it(docker_executor, strategy, corpus_copy, tmp_path):
    """stdout and stderr are kept apart, each with its own head and tail: a flood on stdout after
    a warning on stderr leaves the warning (an engine log file shared by both would rotate it away)."""
    s = strategy("""
        import sys
        def curate(raw, ctx):
            sys.stderr.write("warning: written before the flood\\n")
            sys.stderr.flush()
            block = "z" * 2**20
            for _ in range(64):
                sys.stdout.write(block)
            sys.stdout.flush()
            raise RuntimeError("after the flood")
    """)
    with pytest.raises(CurationFailed) as info:
        run(docker_executor, s, corpus_copy, tmp_path / "out", output_bytes=8192, timeout_s=120)
    assert info.value.reason == "strategy failed: RuntimeError: after the flood"
    assert "warning: written before the flood" in info.value.execution.stderr
    assert "bytes not kept" in info.value.execution.stdout


def test_filling_the_disk_is_stopped(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            for i in range(10_000):
                with open(f"fill{i}.bin", "wb") as f:
                    for _ in range(32):
                        f.write(b"\\0" * 2**20)
    """)
    reason = contained_failure(docker_executor, s, corpus_copy, tmp_path / "out",
                               output_dir_bytes=256 * 2**20, max_file_bytes=64 * 2**20, timeout_s=60)
    assert "output directory exceeded" in reason or "file size limit" in reason


def test_killing_parent_and_pid_1_ends_with_a_reason(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        import os, signal
        def curate(raw, ctx):
            for pid in (os.getppid(), 1):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            raise RuntimeError("still here")
    """)
    reason = contained_failure(docker_executor, s, corpus_copy, tmp_path / "out")
    assert reason


def test_detached_process_does_not_outlive_the_container(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        import subprocess, sys
        def curate(raw, ctx):
            subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)"],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return honest(raw)
    """)
    run(docker_executor, s, corpus_copy, tmp_path / "out")
    assert leftovers(docker_executor) == []


def test_symlinks_named_like_artifacts_are_rejected(docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        import os
        import __main__ as runtime
        real_write = runtime.write_records
        def write_records(out_dir, curated):
            real_write(out_dir, curated)
            os.unlink(out_dir / "sft.jsonl")
            os.symlink("/job/corpus.jsonl", out_dir / "sft.jsonl")
        runtime.write_records = write_records
        def curate(raw, ctx):
            return honest(raw)
    """)
    assert "symbolic link" in contained_failure(docker_executor, s, corpus_copy, tmp_path / "out")


def test_agent_command_runs_over_a_plain_checkout_without_network(docker_executor, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-agent")
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "strategy.py").write_text("def curate(raw, ctx):\n    return {}\n")
    result = docker_executor.run_command(
        "echo edited >> strategy.py; env; python3 -c 'import socket; print(socket.if_nameindex())'; "
        "touch /opt/curateevo/x 2>&1 || true", work)
    assert result.returncode == 0, result.output
    assert "sk-canary" not in result.output
    assert "[(1, 'lo')]" in result.output and "Read-only file system" in result.output
    assert (work / "strategy.py").read_text().endswith("edited\n")
    (work / ".git").mkdir()
    with pytest.raises(Exception, match="plain checkout"):
        docker_executor.run_command("true", work)
    assert leftovers(docker_executor) == []


def test_auto_picks_docker_when_an_engine_answers(docker_executor):  # noqa: ARG001 (engine fixture)
    assert make_executor("auto").name == "docker"


def test_caller_survives_ctrl_c_and_the_container_is_removed(docker_executor, strategy, corpus_copy, tmp_path):
    import signal
    import threading

    s = strategy("""
        import time
        def curate(raw, ctx):
            time.sleep(60)
    """)
    # a real SIGINT to the main thread, as a terminal's Ctrl-C: it interrupts the blocking wait on
    # the engine (`_thread.interrupt_main` only sets a flag, seen once that wait returns at the
    # timeout). With Python's own handler, as in a terminal: a test run started in the background
    # by a non-interactive shell inherits SIGINT ignored, and Python then installs no handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Timer(3.0, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run(docker_executor, s, corpus_copy, tmp_path / "out")
    finally:
        signal.signal(signal.SIGINT, previous)
    time.sleep(1)
    assert leftovers(docker_executor) == []
    assert not (tmp_path / "out").exists()


def test_progress_reaches_the_caller_while_the_container_runs_and_not_its_failure_reason(
        docker_executor, strategy, corpus_copy, tmp_path):
    s = strategy("""
        import time
        from sandbox import progress
        progress.INTERVAL_S, progress.CHECK_EVERY = 0.0, 10   # a 45-record corpus reports at once
        def curate(raw, ctx):
            sum(1 for _ in raw)
            time.sleep(3)   # the lines of the reading above reach the host meanwhile
            raise ValueError("read everything, liked nothing")
    """)
    arrived = []
    with pytest.raises(CurationFailed) as info:
        execute(strategy_files(s), load_corpus([str(corpus_copy)]), tmp_path / "out", executor=docker_executor,
                limits=Limits(timeout_s=60), on_progress=lambda text: arrived.append((time.monotonic(), text)))
    assert arrived and time.monotonic() - arrived[0][0] > 1.5, "the progress lines came only when the container ended"
    assert arrived[0][1].startswith("curation: 10 of 45 records read (")
    assert info.value.reason == "strategy failed: ValueError: read everything, liked nothing"
    assert "progress: " not in info.value.execution.stderr
