"""The process executor: the fallback when no Docker engine answers (the records name it).

The candidate runs as a child in its own session with rlimits (CPU time, address space,
processes, file size, no core dumps), an environment that holds nothing of the host's, and an
unprivileged user where the interpreter is reachable by one. Where bubblewrap (`bwrap`) works it
is contained like a container: a fresh PID namespace (no other process's /proc/<pid>/environ to
read, and every process it started dies with it), no network, the host's filesystem read-only
with the home directories, /run and the project hidden (the runtime packages and the job's
strategy and corpus bound back read-only), the output directory the only writable place.

Read-only means every spelling of a path: bwrap runs in a mount namespace of its own whose mounts
are private (a mount the host makes later, a Docker container's overlay say, does not propagate
in writable), its fresh /proc is remounted read-only (under root the sandbox's uid is the host's
uid 0 without capabilities, which /proc/sys would otherwise let change the host's kernel
settings), and before the first job `probe_bwrap` runs the same sandbox once and reads its mount
table: a reachable mount that is writable outside the scratch places, or one that still receives
propagation, makes the executor refuse generated candidates as it does without bwrap.

Without a working bwrap only a `trusted` executor runs (the user's own strategy, `curateevo
curate --sandbox process`): the network unshared where the kernel allows it, the filesystem not
isolated. An untrusted one (the loop's generated candidates) refuses to start, in one sentence.
A wall-clock timeout kills the whole process group; afterwards every process still carrying the
job's marker is killed too. What could not be isolated is written into `isolation`.
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
import tempfile
import threading
import time
import uuid
from pathlib import Path

from base.errors import RunFailed
from sandbox.checker import output_overflow
from sandbox.executor import BoundedReader, CurationJob, Execution, Limits, PROJECT_ROOT, failure_reason

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
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
    """What this machine lets the process executor isolate (probed once per process)."""
    network = "shared"
    why_net = _probe(lambda: _unshare(CLONE_NEWNET))
    net_flags = CLONE_NEWNET
    if why_net is not None:
        why_user = _probe(lambda: _unshare(CLONE_NEWUSER | CLONE_NEWNET))
        if why_user is None:
            net_flags = CLONE_NEWUSER | CLONE_NEWNET
        else:
            net_flags = 0
            network = f"shared: unshare failed ({why_net})"
    if net_flags:
        network = "unshared"
    user = "caller"
    if os.geteuid() == 0:
        why = _probe(_drop_privileges)
        user = "nobody" if why is None else f"caller (root): nobody cannot run {sys.executable} ({why})"
    return {"network": network, "net_flags": net_flags, "user": user}


@functools.cache
def probe_bwrap() -> str | None:
    """None when bubblewrap can contain a child here (probed once), else why not: it must start,
    and the sandbox it makes must leave nothing of the host writable (`_writable_mounts`)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    with tempfile.TemporaryDirectory(prefix="curateevo-bwrap-probe-") as tmp:
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
        offending = _writable_mounts(done.stdout.decode(errors="replace"), {str(job.out_dir)})
    if offending:
        return f"bwrap leaves {offending[0]} writable or open to the host's new mounts"
    return None


# What may be writable inside: bwrap's own tmpfs /tmp and /dev (device nodes, a private devpts)
SCRATCH_MOUNTS = frozenset({"/tmp", "/dev", "/dev/pts", "/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                            "/dev/urandom", "/dev/tty"})


def _writable_mounts(mountinfo: str, scratch: set[str]) -> list[str]:
    """The mount points of a sandbox's mount table (/proc/self/mountinfo) that a path can reach
    and that are writable outside `scratch` and SCRATCH_MOUNTS, or still receive propagation
    (a mount the host makes later would appear inside as the host made it)."""
    mounts = {}
    for line in mountinfo.splitlines():
        fields = line.split(" - ")[0].split()
        mounts[fields[0]] = {"parent": fields[1], "point": fields[4].replace("\\040", " "),
                             "writable": "rw" in fields[5].split(","), "propagates": fields[6:]}
    covered = {m["parent"] for m in mounts.values()
               if m["parent"] in mounts and mounts[m["parent"]]["point"] == m["point"]}

    def reachable(mid: str) -> bool:   # not hidden under a mount stacked on it or on a mount above it
        while mid in mounts:
            if mid in covered:
                return False
            point = mounts[mid]["point"]
            while mid in mounts and mounts[mid]["point"] == point:
                mid = mounts[mid]["parent"]
        return True

    return [m["point"] for mid, m in mounts.items() if reachable(mid) and
            (m["propagates"] or (m["writable"] and m["point"] not in SCRATCH_MOUNTS | scratch))]


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
    """`trusted`: the strategy is the user's own, so it may run where bwrap cannot contain it."""

    name = "process"

    def __init__(self, trusted: bool = False):
        self.trusted = trusted
        why = probe_bwrap()
        if why is not None and not trusted:
            raise RunFailed(f"the process sandbox cannot contain a generated candidate here ({why}): install "
                            f"bubblewrap (apt-get install bubblewrap) or a Docker engine (scripts/setup.sh); only "
                            f"your own strategy runs uncontained, with `curateevo curate --sandbox process`")

    def describe(self) -> dict:
        if probe_bwrap() is None:
            return {"executor": self.name, "network": "unshared", "user": "nobody (user namespace)",
                    "rlimits": ["cpu", "address_space", "processes", "file_size", "core"],
                    "session": "bubblewrap: own PID namespace, killed with its parent; group killed on timeout",
                    "filesystem": "read-only host, private mounts, read-only /proc; homes, /run and project "
                                  "hidden; one writable output dir"}
        iso = probe_isolation()
        return {"executor": self.name, "network": iso["network"], "user": iso["user"],
                "rlimits": ["cpu", "address_space", "processes", "file_size", "core"],
                "session": "own session; process group killed on timeout and at exit",
                "filesystem": f"not isolated ({probe_bwrap()}): the candidate sees the host's files with the "
                              f"executing user's rights (a trusted strategy only)"}

    def run(self, job: CurationJob, limits: Limits) -> Execution:
        contained = probe_bwrap() is None
        iso = probe_isolation()
        net_flags = 0 if contained else iso["net_flags"]   # bwrap unshares the network itself
        marker = uuid.uuid4().hex
        drop = iso["user"] == "nobody"   # root becomes nobody before bwrap where nobody can run Python
        if drop:
            os.chown(job.out_dir, NOBODY, NOBODY)

        def preexec() -> None:
            for rlim, value in ((resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory_bytes),
                                (resource.RLIMIT_NPROC, limits.max_processes),
                                (resource.RLIMIT_FSIZE, limits.max_file_bytes), (resource.RLIMIT_CORE, 0)):
                resource.setrlimit(rlim, (value, value))
            if net_flags:
                _unshare(net_flags)
            if contained:   # before dropping root: nothing the host mounts later propagates in
                _private_mounts()
            if drop:
                _drop_privileges()

        argv = [sys.executable, *job.runtime_args(str(job.strategy_dir), str(job.corpus_path), str(job.out_dir),
                                                  job.env_dir and str(job.env_dir), job.llm_socket and str(job.llm_socket))]
        if contained:
            argv = bwrap_argv(job) + argv
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=job.out_dir, env=_base_env(job.hash_seed_env(), marker),
                                start_new_session=True, preexec_fn=preexec)
        readers = [BoundedReader(proc.stdout, limits.output_bytes), BoundedReader(proc.stderr, limits.output_bytes)]
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
            raise
        self._kill(proc, marker)
        returncode = proc.wait()
        wall = time.monotonic() - start
        for reader in readers:
            reader.join(timeout=5)
        stdout, stderr = (r.text() for r in readers)
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


