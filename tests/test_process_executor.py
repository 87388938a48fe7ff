"""The process executor contains a candidate: limits, scrubbed environment, timeout, bounded output."""
import os
import time

import pytest

from sandbox.curate import CurationFailed, execute
from corpora import load_corpus
from sandbox.executor import Limits
from sandbox.process_executor import ProcessExecutor, probe_isolation
from workspace.repository import strategy_files


def run(strategy_dir, corpus_path, out, **limits):
    return execute(strategy_files(strategy_dir), load_corpus([str(corpus_path)]), out,
                   executor=ProcessExecutor(), limits=Limits(**{"timeout_s": 60, **limits}))


def failure(strategy_dir, corpus_path, out, **limits) -> str:
    with pytest.raises(CurationFailed) as info:
        run(strategy_dir, corpus_path, out, **limits)
    assert not out.exists(), "a failed candidate leaves no output directory"
    return info.value.reason


def test_candidate_environment_holds_no_host_secret(strategy, sample_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-123456")
    s = strategy("""
        import os
        def curate(raw, ctx):
            out = honest(raw)
            out["memory"] = [{"id": "env", "key": "env", "content": repr(sorted(os.environ.items()))}]
            return out
    """)
    result = run(s, sample_corpus, tmp_path / "out")
    memory = (result.out_dir / "memory.jsonl").read_text()
    assert "sk-canary" not in memory and "OPENAI_API_KEY" not in memory
    assert "PYTHONHASHSEED" in memory


def test_strategy_exception_is_a_reason_with_its_message(strategy, sample_corpus, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            raise ValueError("no trajectories worth keeping")
    """)
    assert failure(s, sample_corpus, tmp_path / "out") == "strategy failed: ValueError: no trajectories worth keeping"


def test_endless_loop_and_its_children_are_killed_at_the_timeout(strategy, sample_corpus, tmp_path):
    marker = tmp_path / "child-alive"
    s = strategy(f"""
        import subprocess, sys, time
        def curate(raw, ctx):
            # a detached grandchild in a new session that would outlive the candidate
            subprocess.Popen([sys.executable, "-c",
                "import time, pathlib\\nwhile True:\\n    pathlib.Path({str(marker)!r}).touch(); time.sleep(0.1)"],
                start_new_session=True)
            while True:
                time.sleep(1)
    """)
    t0 = time.monotonic()
    reason = failure(s, sample_corpus, tmp_path / "out", timeout_s=3)
    assert "timed out after 3 s" in reason
    assert time.monotonic() - t0 < 30
    time.sleep(0.5)
    marker.unlink(missing_ok=True)
    time.sleep(0.5)
    assert not marker.exists(), "the detached grandchild was left running"


def test_unbounded_allocation_is_rejected_naming_the_memory_cap_and_the_peak(strategy, sample_corpus, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            hoard = []
            while True:
                hoard.append(bytes(2**26))
    """)
    reason = failure(s, sample_corpus, tmp_path / "out", memory_bytes=1 * 2**30)
    assert reason.startswith("strategy failed: MemoryError: out of memory: the sandbox's cap is 1.00 GiB of "
                             "address space and the strategy's peak resident memory was 0.")
    assert "keep fewer records in memory" in reason


def test_the_kernels_enomem_at_the_cap_is_out_of_memory_too(strategy, sample_corpus, tmp_path):
    """At the address-space cap an import's directory scan fails with OSError ENOMEM (seen at 10^6
    trajectories: `OSError: [Errno 12] Cannot allocate memory: '…/strategy'`), not MemoryError: the
    reason still names the cap and the peak."""
    s = strategy("""
        import errno

        def curate(raw, ctx):
            raise OSError(errno.ENOMEM, "Cannot allocate memory", "/tmp/job/strategy")
    """)
    reason = failure(s, sample_corpus, tmp_path / "out", memory_bytes=1 * 2**30)
    assert reason.startswith("strategy failed: MemoryError: out of memory: the sandbox's cap is 1.00 GiB of "
                             "address space and the strategy's peak resident memory was 0."), reason


def test_a_finished_candidate_records_its_peak_memory(strategy, sample_corpus, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            hoard = b"x" * (300 * 2**20)   # written: resident
            return honest(raw)
    """)
    peak = run(s, sample_corpus, tmp_path / "out").execution["execution"]["peak_rss_bytes"]
    assert 300 * 2**20 < peak < 2**30


def test_huge_file_hits_the_file_size_limit(strategy, sample_corpus, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            with open("sft.jsonl", "wb") as f:
                while True:
                    f.write(b"x" * 2**20)
    """)
    reason = failure(s, sample_corpus, tmp_path / "out", max_file_bytes=8 * 2**20)
    # the kernel's SIGXFSZ where the writer does not ignore it; else the runtime's sentence for EFBIG
    assert "file size limit" in reason or "file too large: the sandbox's cap on one file is 8 MiB" in reason


def test_printing_without_end_keeps_only_a_bounded_tail(strategy, sample_corpus, tmp_path):
    s = strategy("""
        import sys
        def curate(raw, ctx):
            for _ in range(200):
                sys.stdout.write("y" * 2**20)
            return honest(raw)
    """)
    result = run(s, sample_corpus, tmp_path / "out", output_bytes=4096)
    kept = result.execution["execution"]["stderr"]
    assert len(kept) < 10_000


def test_fork_bomb_is_stopped_by_the_process_limit(strategy, sample_corpus, tmp_path):
    s = strategy("""
        import os, time
        def curate(raw, ctx):
            while True:
                try:
                    if os.fork() == 0:
                        time.sleep(60); os._exit(0)
                except OSError:
                    raise RuntimeError("fork refused")
    """)
    info = probe_isolation()
    # The loop never ends by itself: either the process limit refuses a fork, or (root being
    # exempt from RLIMIT_NPROC) the timeout ends it and the whole group is killed.
    timeout = 20 if info["user"] == "nobody" else 5
    reason = failure(s, sample_corpus, tmp_path / "out", timeout_s=timeout, max_processes=32)
    if info["user"] == "nobody":
        assert "fork refused" in reason
    else:  # root is exempt from RLIMIT_NPROC: the timeout ends it, and the group is killed
        assert "fork refused" in reason or "timed out" in reason


def test_network_is_unshared_or_the_reason_is_recorded(strategy, sample_corpus, tmp_path):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    s = strategy(f"""
        import socket
        def curate(raw, ctx):
            out = honest(raw)
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
                verdict = "connected"
            except OSError as exc:
                verdict = "refused"
            out["memory"] = [{{"id": "net", "key": "net", "content": verdict}}]
            return out
    """)
    result = run(s, sample_corpus, tmp_path / "out")
    server.close()
    network = result.execution["execution"]["isolation"]["network"]
    verdict = (result.out_dir / "memory.jsonl").read_text()
    if network == "unshared":
        assert "refused" in verdict
    else:
        assert network.startswith("shared: ") and "connected" in verdict
    if os.geteuid() == 0:  # root on Linux can always make a network namespace
        assert network == "unshared"


def test_auto_falls_back_loudly_without_an_engine_and_refuses_under_ci(monkeypatch):
    from base.errors import RunFailed
    from sandbox.curate import make_executor

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.delenv("CI", raising=False)
    said = []
    assert make_executor("auto", warn=said.append).name == "process"
    assert len(said) == 1 and said[0].startswith("WARNING: no Docker engine answers") and "process executor" in said[0]
    monkeypatch.setenv("CI", "true")
    with pytest.raises(RunFailed, match="no Docker engine answers"):
        make_executor("auto", warn=said.append)
    monkeypatch.delenv("CI")
    with pytest.raises(RunFailed):
        make_executor("docker")
