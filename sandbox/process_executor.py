"""The process executor: the fallback when no Docker engine answers (the records name it).

The candidate runs under bubblewrap (`bwrap`) as a child in its own session with rlimits (CPU
time, address space, processes, file size, no core dumps) and an environment that holds nothing
of the host's, contained like a container: a fresh PID namespace (no other process's
/proc/<pid>/environ to read, and every process it started dies with it), no network, an
unprivileged user, the host's filesystem read-only with the home directories, /run and the
project hidden (the runtime packages and the job's strategy and corpus bound back read-only),
the output directory (and the LLM channel's folder) the only writable places.

Read-only means every spelling of a path (`/proc/self/root/…`, `/proc/PID/root/…`, a reopened
descriptor, a symlink: each resolves to a mount, and the mount decides): bwrap runs in a mount
namespace of its own whose mounts are private (a mount the host makes later, a Docker
container's overlay say, does not propagate in writable), its fresh /proc is remounted read-only
(under root the sandbox's uid is the host's uid 0 without capabilities, which /proc/sys would
otherwise let change the host's kernel settings), `probe_bwrap` runs the same sandbox once and
reads its mount table, and every job reads its own before its strategy starts
(`sandbox/mount_table.py`): a reachable mount writable outside the scratch places, or one that
still receives propagation, means no strategy runs.

Where bwrap is missing or cannot contain a strategy so, the executor refuses to start, in one
sentence, for any strategy, the user's own included (issue 46). A wall-clock timeout kills the
whole process group; afterwards every process still carrying the job's marker is killed too.
"""
from __future__ import annotations

import ctypes
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from base.lifetime import owned_temporary_directory
from base.errors import RunFailed
from sandbox.checker import output_overflow
from sandbox.executor import (BoundedReader, BoundedTail, CurationJob, Execution, Limits, PROJECT_ROOT, RuntimeStderr,
                              failure_reason)
from sandbox.mount_table import writable_mounts

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
NOBODY = 65534
TMP_BYTES = 64 * 2**20   # the private /tmp under bubblewrap (as the Docker executor's tmpfs)


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def _private_mounts() -> None:
    """A mount namespace of our own whose mounts receive no propagation from the host (bwrap's
    own namespace is a slave of this one, so nothing the host mounts later shows up inside)."""
    uid, gid = os.geteuid(), os.getegid()
    _unshare(CLONE_NEWNS if uid == 0 else CLONE_NEWUSER | CLONE_NEWNS)
    if uid != 0:   # an unprivileged caller maps only itself, then owns the new mount namespace
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def _probe(preexec) -> str | None:
    """Run `python -c pass` under `preexec`; None if it worked, else why not."""
    try:
        done = subprocess.run([sys.executable, "-c", "import sandbox.runtime"], preexec_fn=preexec,
                              env=_base_env("0", "probe"), cwd="/", capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc).splitlines()[0]
    if done.returncode:
        return (done.stderr.decode(errors="replace").strip().splitlines() or ["exit %d" % done.returncode])[-1]
    return None


@functools.cache
def probe_isolation() -> dict:
    """Whether the sandbox's user can be nobody here (probed once per process): root drops to
    nobody before bwrap where nobody can run the interpreter."""
    user = "caller"
    if os.geteuid() == 0:
        why = _probe(_drop_privileges)
        user = "nobody" if why is None else f"caller (root): nobody cannot run {sys.executable} ({why})"
    return {"user": user}


@functools.cache
def probe_bwrap() -> str | None:
    """None when bubblewrap can contain a child here (probed once), else why not: it must start,
    and the sandbox it makes must leave nothing of the host writable (`writable_mounts`)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    with owned_temporary_directory("bwrap-probe") as tmp:
        job = CurationJob(Path(tmp) / "strategy", Path(tmp) / "corpus.jsonl", Path(tmp) / "out", 0)
        job.strategy_dir.mkdir()
        job.corpus_path.touch()
        job.out_dir.mkdir()
        done = None
        try:
            done = subprocess.run([*bwrap_argv(job), "/bin/cat", "/proc/self/mountinfo"], capture_output=True,
                                  timeout=30, preexec_fn=_private_mounts, cwd="/")
        except (OSError, subprocess.SubprocessError) as exc:
            return f"bwrap cannot start ({str(exc).splitlines()[0]})"
        if done.returncode:
            return f"bwrap cannot start ({(done.stderr.decode(errors='replace').strip().splitlines() or ['?'])[-1][:200]})"
        offending = writable_mounts(done.stdout.decode(errors="replace"), {str(job.out_dir)})
    if offending:
        return f"bwrap leaves {offending[0]} writable or open to the host's new mounts"
    return None


def _bwrap_namespaces() -> list[str]:
    user = ["--uid", str(NOBODY), "--gid", str(NOBODY)] if os.geteuid() == 0 else []
    return ["--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", *user, "--die-with-parent", "--new-session"]


def bwrap_argv(job: CurationJob) -> list[str]:
    """bwrap's arguments for one job: namespaces, a read-only host, hidden homes, /run and
    project, the runtime packages and the job bound back, the output directory writable."""
    argv = [shutil.which("bwrap"), *_bwrap_namespaces(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    hidden = [path for path in ("/root", "/home", "/run", str(PROJECT_ROOT)) if os.path.isdir(path)]
    for path in hidden:
        argv += ["--size", str(2**20), "--tmpfs", path]
    shown = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    shown |= {os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    for path in sorted(shown):
        argv += ["--ro-bind", path, path]
    for pkg in ("base", "sandbox", "curation_strategies"):
        argv += ["--ro-bind", str(PROJECT_ROOT / pkg), str(PROJECT_ROOT / pkg)]
    argv += ["--ro-bind", str(job.strategy_dir), str(job.strategy_dir),
             "--ro-bind", str(job.corpus_path), str(job.corpus_path),
             "--bind", str(job.out_dir), str(job.out_dir), "--chdir", str(job.out_dir)]
    if job.env_dir is not None:   # ctx.env's train-split scenarios, read-only
        argv += ["--ro-bind", str(job.env_dir), str(job.env_dir)]
    if job.llm_socket is not None:   # ctx.llm's channel: the socket's folder (the host creates the socket in it)
        argv += ["--bind", str(Path(job.llm_socket).parent), str(Path(job.llm_socket).parent)]
    for path in hidden:   # empty and read-only; what was bound inside keeps its own mode
        argv += ["--remount-ro", path]
    return argv + ["--remount-ro", "/proc", "--"]   # /proc/sys is the host kernel's (module docstring)


def _check_started(started_r: int, stderr: str, timed_out: bool) -> None:
    """RunFailed when the strategy never started: bwrap failed, or the job's mount table left
    something of the host writable (mount_table.py said why on stderr). Not the candidate's fault."""
    os.set_blocking(started_r, False)
    try:
        started = os.read(started_r, 1) == b"1"
    except BlockingIOError:
        started = False
    finally:
        os.close(started_r)
    if not started and not timed_out:
        why = (stderr.strip().splitlines() or ["no reason printed"])[-1][:300]
        raise RunFailed(f"the process sandbox refused to start the strategy: {why}; nothing of it ran "
                        "(use --sandbox docker, or run again once the host's mounts are back to normal)")


def _drop_privileges() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _base_env(hash_seed: str, marker: str) -> dict[str, str]:
    """The child's whole environment: nothing of the host's (no keys, no proxies, no HOME)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(PROJECT_ROOT),
        "PYTHONHASHSEED": hash_seed,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONIOENCODING": "utf-8",
        "LANG": "C.UTF-8",
        "HOME": "/nonexistent",
        "OMP_NUM_THREADS": "1",
        "CURATEEVO_JOB": marker,
    }


def _reap(marker: str) -> int:
    """Kill every process that still carries the job's marker (a detached child, say)."""
    needle = f"CURATEEVO_JOB={marker}".encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError):
            continue
    return killed


class ProcessExecutor:
    """`trusted` is accepted for the registry's sake: bubblewrap holds any strategy alike, the
    user's own included, and without it nothing runs (module docstring)."""

    name = "process"

    def __init__(self, trusted: bool = False):
        why = probe_bwrap()
        if why is not None:
            raise RunFailed(f"the process sandbox cannot contain a strategy here ({why}): install bubblewrap "
                            f"(apt-get install bubblewrap) or a Docker engine (scripts/setup.sh) and use it "
                            f"with --sandbox docker")

    def describe(self) -> dict:
        return {"executor": self.name, "network": "unshared", "user": "nobody (user namespace)",
                "rlimits": ["cpu", "address_space", "processes", "file_size", "core"],
                "session": "bubblewrap: own PID namespace, killed with its parent; group killed on timeout",
                "filesystem": "read-only host, private mounts, read-only /proc, the job's own mount table checked; "
                              "homes, /run and project hidden; one writable output dir"}

    def run(self, job: CurationJob, limits: Limits, on_progress: Callable[[str], None] | None = None) -> Execution:
        marker = uuid.uuid4().hex
        drop = probe_isolation()["user"] == "nobody"   # root becomes nobody before bwrap where nobody can run Python
        if drop:
            os.chown(job.out_dir, NOBODY, NOBODY)

        def preexec() -> None:
            for rlim, value in ((resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory_bytes),
                                (resource.RLIMIT_NPROC, limits.max_processes),
                                (resource.RLIMIT_FSIZE, limits.max_file_bytes), (resource.RLIMIT_CORE, 0)):
                resource.setrlimit(rlim, (value, value))
            _private_mounts()   # before dropping root: nothing the host mounts later propagates in
            if drop:
                _drop_privileges()

        scratch = [str(job.out_dir)] + ([str(Path(job.llm_socket).parent)] if job.llm_socket is not None else [])
        started_r, started_w = os.pipe()   # the job's own mount table passed its check (sandbox/mount_table.py)
        argv = [*bwrap_argv(job), sys.executable, "-I", "-S", str(PROJECT_ROOT / "sandbox" / "mount_table.py"),
                str(started_w), *scratch, "--", sys.executable,
                *job.runtime_args(str(job.strategy_dir), str(job.corpus_path), str(job.out_dir),
                                  job.env_dir and str(job.env_dir), job.llm_socket and str(job.llm_socket))]
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=job.out_dir, env=_base_env(job.hash_seed_env(), marker), pass_fds=(started_w,),
                                    start_new_session=True, preexec_fn=preexec)
        finally:
            os.close(started_w)
        readers = [BoundedReader(proc.stdout, BoundedTail(limits.output_bytes)),
                   BoundedReader(proc.stderr, RuntimeStderr(limits.output_bytes, on_progress))]
        for reader in readers:
            reader.start()
        over: list[str] = []
        threading.Thread(target=self._watch_output, args=(proc, job.out_dir, limits, over), daemon=True).start()
        timed_out = False
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:  # Ctrl-C in the caller: the candidate goes down with it
            self._kill(proc, marker)
            os.close(started_r)
            raise
        self._kill(proc, marker)
        returncode = proc.wait()
        wall = time.monotonic() - start
        for reader in readers:
            reader.join(timeout=5)
        stdout, stderr = (r.text() for r in readers)
        _check_started(started_r, stderr, timed_out)
        return Execution(executor=self.name, returncode=None if timed_out else returncode, wall_s=wall,
                         stdout=stdout, stderr=stderr, timed_out=timed_out,
                         reason=over[0] if over else failure_reason(returncode, stderr, timed_out, limits.timeout_s),
                         isolation={k: v for k, v in self.describe().items()})

    @staticmethod
    def _watch_output(proc: subprocess.Popen, folder: Path, limits: Limits, over: list) -> None:
        """Kill the candidate when its output directory passes its bytes or its file count."""
        while proc.poll() is None:
            reason = output_overflow(folder, limits.output_dir_bytes)
            if reason is not None:
                over.append(reason)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return
            time.sleep(0.2)

    @staticmethod
    def _kill(proc: subprocess.Popen, marker: str) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap(marker)


