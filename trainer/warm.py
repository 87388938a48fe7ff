"""Training children forked from a warm process: the libraries are imported once, not per training.

A training child spends its first seconds importing torch, transformers, PEFT, TRL and datasets
(~5 s on 2 CPU cores, more than a `test`-profile training itself). `start(request, env, cwd)`
forks the child from a multiprocessing *forkserver* that imported them once (started on the
first training of the calling process, or earlier by `prestart`; it exits after the caller and its
children, and is killed when the caller dies: trainer.warm_server). The child is the process `python -m trainer.worker REQUEST` would be: its own
session; killed when the caller dies (a thread waits on the caller's pidfd: the forkserver stays
up while a child of its runs, so PR_SET_PDEATHSIG alone would not do) or the forkserver does;
stdout and stderr into the pipe the caller reads; the caller's environment; `PYTHONHASHSEED=0`
(Python fixes its hash seed at start-up, so the forkserver is started, and restarted, in the
child's environment; PEFT writes `all-linear`'s modules from a set). The forkserver has only
imported; it never computed, so no thread pool is forked half-used.

`CURATEEVO_WARM_TRAINING=0` starts every training as a fresh `python -m trainer.worker` instead
(the two give the same adapter bytes: tests/test_trainer_e2e.py).
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading

from base.lifetime import die_with_parent

PRELOAD = ["trainer.warm_server", "trainer.worker", "torch", "transformers", "peft", "datasets", "trl.trainer.sft_trainer",
           "trl.trainer.grpo_trainer"]
"""What the forkserver imports before its first fork (an import that fails there is retried in the child);
trainer.warm_server first, so that the forkserver dies with this process even if killed during the imports."""

READ_AT_IMPORT = ("OMP_", "GOMP_", "KMP_", "MKL_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_",
                  "PYTHONHASHSEED", "PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH")
"""Environment variables read once, when the preloaded libraries load (OpenMP's pools, the Hugging Face
hub's paths and offline switch): a training whose values differ from the forkserver's starts as a
fresh process. The rest (CUDA's, torch's compiler caches, trackers') is read when used, after the
child has taken the caller's environment."""

_lock = threading.Lock()
_server: tuple | None = None   # (the forkserver context, the import-time environment it started with)


def enabled() -> bool:
    return os.environ.get("CURATEEVO_WARM_TRAINING", "1") != "0"


def _import_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(READ_AT_IMPORT)}


@contextlib.contextmanager
def _environment(env: dict):
    """This process's environment holds `env` meanwhile: a forkserver (re)started now starts in it."""
    changed = {k: os.environ.get(k) for k, v in env.items() if os.environ.get(k) != v}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in changed.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _server_env(env: dict) -> dict:
    """The forkserver's environment: the child's, and this process's pid for trainer.warm_server."""
    from trainer.warm_server import PARENT_ENV

    return {**env, PARENT_ENV: str(os.getpid())}


def _forkserver(env: dict):
    """The forkserver context, started once in the child's environment (hash seed included) with
    the libraries imported; None when `env` differs from that environment where imports read it."""
    global _server
    with _lock:
        if _server is None:
            from multiprocessing import forkserver

            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            with _environment(_server_env(env)):
                forkserver.ensure_running()
            _server = (context, _import_env(env))
        context, started_with = _server
        return context if _import_env(env) == started_with else None


class Child:
    """A started training child, as much of `subprocess.Popen` as trainer.train uses."""

    def __init__(self, process, stdout_fd: int):
        self.process, self.stdout_fd, self.pid = process, stdout_fd, process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self) -> int:
        self.process.join()
        if self.stdout_fd >= 0:
            os.close(self.stdout_fd)
            self.stdout_fd = -1
        return self.process.exitcode

    def kill_group(self) -> None:
        """SIGKILL to the child's session (it and whatever it started)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:   # before its setsid, or already gone
            self.process.kill()


def prestart(env: dict) -> None:
    """Start the forkserver now, in the training child's environment `env`, and return at once: its
    imports (~9 s on 2 CPU cores) run beside the caller's own work (a run's checks before its first
    training, which import transformers on the first core), so that training forks without waiting.
    Nothing when warm training is off or the forkserver runs already; a later training whose
    import-time environment differs from `env` starts as a fresh process, as without this."""
    if enabled():
        _forkserver(env)


def start(request_path: str, env: dict, cwd: str) -> Child | None:
    """Fork a training child that runs `trainer.worker.main([request_path])` in `env` (which
    holds PYTHONHASHSEED=0); None when it must start as a fresh process (`enabled`, `READ_AT_IMPORT`)."""
    context = _forkserver(env) if enabled() else None
    if context is None:
        return None
    reader, writer = context.Pipe(duplex=False)   # raw bytes: the child's fds 1 and 2
    process = context.Process(target=_child, args=(request_path, writer, env, cwd, os.getpid()), name="curateevo-train")
    with _lock, _environment(_server_env(env)):   # a forkserver that died is restarted here, in the child's environment
        process.start()
    writer.close()
    fd = os.dup(reader.fileno())
    reader.close()
    return Child(process, fd)


def _die_with(pid: int) -> None:
    """Kill this session (the training and what it started) once process `pid` has ended."""
    import select
    import time

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os.killpg(0, signal.SIGKILL)
    except (AttributeError, OSError):   # no pidfds (Linux < 5.3): poll
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os.killpg(0, signal.SIGKILL)
            time.sleep(0.5)
    select.select([fd], [], [])
    os.killpg(0, signal.SIGKILL)


def _child(request_path: str, writer, env: dict, cwd: str, caller: int) -> None:
    os.setsid()
    die_with_parent()   # the forkserver's death
    if os.getppid() == 1:   # the forkserver died before the line above
        os._exit(signal.SIGKILL + 128)
    # the caller is not the parent (the forkserver outlives it while a child of its runs): watch it
    threading.Thread(target=_die_with, args=(caller,), daemon=True, name="curateevo-caller-watch").start()
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(writer.fileno(), 1)
    os.dup2(writer.fileno(), 2)
    writer.close()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [sys.executable, "-m", "trainer.worker", request_path]
    from trainer import worker

    code = worker.main([request_path])
    sys.stdout.flush(), sys.stderr.flush()
    sys.exit(code)
