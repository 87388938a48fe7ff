"""The Docker executor: the default sandbox for candidate strategies and the code agent's commands.

One container per candidate (and per agent command), from the image `sandbox/image.py` builds:
no network, read-only root, a small tmpfs /tmp, the strategy files, corpus and project packages
mounted read-only, one writable output directory, an unprivileged user (uid 10001), no
capabilities, no new privileges, memory / CPU / pids limits, a file-size ulimit and a watchdog on
the output directory's total size, an environment with nothing of the host's, no log on
disk, and a wall-clock timeout. The container is removed on every path: success, failure,
timeout, Ctrl-C, and SIGTERM/SIGHUP of the caller. A caller killed with SIGKILL cannot clean up,
so the container does not depend on it: its init (`sandbox/container_init.py`) ends it within a
moment of the host's death (the engine closes the stdin the host holds attached), its job runs
under `timeout` inside it (killed DEADLINE_GRACE_S after the host's own deadline, whatever became
of the host or its connection), and it carries its owner's `boot:pid:start time` label, by which the next curateevo command
(`sandbox.leftovers.reap_leftovers`, and every new `DockerExecutor`) removes the containers whose
owner is gone. (Not `--rm`: the host reads the exit status and OOM flag of an ended container
before removing it.)

Output is read from the container's attached streams while it runs, stdout and stderr apart,
each kept as a bounded head and tail (`BoundedTail`), as the process executor reads its pipes.
Not from `docker logs`: the engine writes both streams to one capped log file, so a flood on
stdout that the engine drains after the strategy's traceback can rotate the traceback away.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import docker
from docker.errors import DockerException, NotFound
from docker.types import LogConfig, Mount, Ulimit

from base.errors import RunFailed
from sandbox.checker import output_overflow
from sandbox.docker_engine import docker_client
from sandbox.executor import (PROJECT_ROOT, BoundedTail, CommandResult, CurationJob, Execution, Limits, RuntimeStderr,
                              failure_reason, memory_reason)
from sandbox.image import ensure_image
from sandbox.image_lock import SANDBOX_UID
from sandbox.leftovers import OWNER_LABEL, owner_id, reap_orphans

PROJECT_MOUNT = "/opt/curateevo"
# Only the packages the runtime imports are visible inside, never the runs or the venv.
RUNTIME_PACKAGES = ("base", "sandbox", "curation_strategies")
LABEL = "curateevo.job"


DEADLINE_GRACE_S = 5.0   # the in-container deadline's lead over the host's: the host times out first
READ_GRACE_S = 30.0      # how long the host drains an ended container's streams before giving up


def within_deadline(command: list[str], limits: Limits) -> list[str]:
    """`command` run by the container's init (`sandbox/container_init.py`: the container ends
    within a moment of its host's death) under coreutils' `timeout`, so the container also ends at
    its deadline whatever becomes of the host or of the engine's connection."""
    return ["python3", "-I", "-S", f"{PROJECT_MOUNT}/sandbox/container_init.py",
            "timeout", "--signal=KILL", f"{limits.timeout_s + DEADLINE_GRACE_S:g}", *command]


_LIVE: dict[str, object] = {}   # containers this process runs now: removed at exit whatever the path


@atexit.register
def _remove_live() -> None:
    for container in list(_LIVE.values()):
        try:
            container.remove(force=True)
        except DockerException:
            pass


@contextlib.contextmanager
def _terminable():
    """SIGTERM and SIGHUP raise SystemExit(128 + signal) while a container runs, so the `finally`
    that removes it runs (the default action would end the process on the spot)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, _frame):
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _close(sock) -> None:
    """Close an attach socket (the SDK returns a socket, or a SocketIO wrapping one)."""
    for part in (getattr(sock, "_sock", None), sock):
        try:
            if part is not None:
                part.close()
        except OSError:
            pass


class DockerExecutor:
    name = "docker"

    def __init__(self, client: docker.DockerClient | None = None, image: str | None = None, trusted: bool = False):
        """`trusted` is accepted for the registry's sake: a container holds any candidate alike."""
        self.client = client or docker_client()
        self._image = image
        self.markers: list[str] = []   # the `curateevo.job` label of every container this executor made
        self.reaped = reap_orphans(self.client)   # left by a curateevo process killed with SIGKILL

    @property
    def image(self) -> str:
        if self._image is None:
            self._image = ensure_image()
        return self._image

    def describe(self) -> dict:
        return {"executor": self.name, "image": self.image, "network": "none", "user": str(SANDBOX_UID),
                "filesystem": "read-only root; strategy, corpus and runtime read-only; one writable output dir",
                "capabilities": "all dropped, no-new-privileges"}

    # ------------------------------------------------------------------ containers

    def _container_args(self, limits: Limits, marker: str, env: dict[str, str]) -> dict:
        self.markers.append(marker)
        return dict(
            image=self.image, user=f"{SANDBOX_UID}:{SANDBOX_UID}", network_mode="none", read_only=True,
            hostname="sandbox",   # not the random container id: what a command prints is reproducible
            tmpfs={"/tmp": "rw,nosuid,nodev,size=64m,mode=1777"}, environment=env,
            mem_limit=limits.memory_bytes, memswap_limit=limits.memory_bytes,
            nano_cpus=int(limits.cpus * 1e9), pids_limit=limits.max_processes,
            ulimits=[Ulimit(name="fsize", soft=limits.max_file_bytes, hard=limits.max_file_bytes),
                     Ulimit(name="core", soft=0, hard=0), Ulimit(name="nofile", soft=1024, hard=1024)],
            cap_drop=["ALL"], security_opt=["no-new-privileges"], ipc_mode="none",
            log_config=LogConfig(type="none"),   # output is read from the attached streams: nothing on disk
            labels={LABEL: marker, OWNER_LABEL: owner_id() or ""}, tty=False,
            # the host's lifeline: stdin, attached once by the host and closed by the engine when the host
            # dies (`detach=False` is how the SDK sets StdinOnce); container_init is PID 1 (no docker-init)
            stdin_open=True, detach=False, init=False,
        )

    def _runtime_mounts(self) -> list[Mount]:
        return [Mount(f"{PROJECT_MOUNT}/{pkg}", str(PROJECT_ROOT / pkg), type="bind", read_only=True)
                for pkg in RUNTIME_PACKAGES]

    def _run_container(self, args: dict, limits: Limits, watch: Path | None, combined: bool = False,
                       on_progress: Callable[[str], None] | None = None) -> tuple[dict, str, str, bool, str | None, float]:
        """Create, start, wait (with the timeout and the output watchdog), read logs, remove: on
        every path, SIGTERM and SIGHUP of the caller included (SIGKILL: `reap_orphans`).
        `on_progress`: the runtime's progress lines, taken out of stderr as they arrive (RuntimeStderr)."""
        with _terminable():
            return self._run_created(args, limits, watch, combined, time.monotonic(), on_progress)

    def _run_created(self, args: dict, limits: Limits, watch: Path | None, combined: bool, start: float,
                     on_progress: Callable[[str], None] | None):
        container = lifeline = None
        over: list[str] = []
        stop = threading.Event()
        try:
            container = self.client.containers.create(**args)
            _LIVE[container.id] = container
            if watch is not None:
                threading.Thread(target=self._watch_size, args=(container, watch, limits, over, stop),
                                 daemon=True).start()
            # attached before start, as `docker start -a` does: no byte is written before the host reads
            streams = container.attach(stdout=True, stderr=True, stream=True, logs=False, demux=not combined)
            lifeline = self.client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1})
            kept = (BoundedTail(limits.output_bytes), RuntimeStderr(limits.output_bytes, on_progress))
            reader = threading.Thread(target=self._drain, args=(streams, kept, combined), daemon=True)
            reader.start()
            container.start()
            timed_out = False
            try:
                status = container.wait(timeout=limits.timeout_s)
            except Exception:  # the engine's wait timed out (requests raises its own types)
                timed_out = True
                container.kill()
                status = container.wait(timeout=30)
            wall = time.monotonic() - start
            stop.set()
            reader.join(timeout=READ_GRACE_S)   # the streams end when the container does
            streams.close()
            container.reload()
            oom = container.attrs["State"].get("OOMKilled", False)
            stdout, stderr = kept[0].text(), ("" if combined else kept[1].text())
            reason = over[0] if over else (memory_reason(limits.memory_bytes) if oom else None)
            return status, stdout, stderr, timed_out, reason, wall
        finally:
            stop.set()
            if lifeline is not None:   # held until the container ended: closing it ends the container
                _close(lifeline)
            # interrupted inside `create` (SIGTERM between the engine's answer and the SDK's): found by its label
            made = [container] if container is not None else self.client.containers.list(
                all=True, filters={"label": f"{LABEL}={args['labels'][LABEL]}"})
            for leftover in made:
                try:
                    leftover.remove(force=True)
                except NotFound:
                    pass
                _LIVE.pop(leftover.id, None)

    @staticmethod
    def _drain(streams, kept: tuple[BoundedTail, BoundedTail], combined: bool) -> None:
        """Reads the attached streams to their end. `combined`: one stream in the order it was
        written, as a terminal shows it; otherwise (stdout chunk, stderr chunk) pairs."""
        try:
            for item in streams:
                if combined:
                    kept[0].feed(item)
                    continue
                out, err = item
                if out:
                    kept[0].feed(out)
                if err:
                    kept[1].feed(err)
        except (DockerException, OSError, ValueError):   # closed under us: the container is gone
            pass

    @staticmethod
    def _watch_size(container, folder: Path, limits: Limits, over: list, stop: threading.Event) -> None:
        while not stop.wait(0.2):
            reason = output_overflow(folder, limits.output_dir_bytes)
            if reason is not None:
                over.append(reason)
                try:
                    container.kill()
                except DockerException:
                    pass
                return

    def leftovers(self) -> list:
        """Containers this executor made that still exist (there should never be any)."""
        return [c for m in self.markers for c in self.client.containers.list(all=True, filters={"label": f"{LABEL}={m}"})]

    # ------------------------------------------------------------------ the two jobs

    def run(self, job: CurationJob, limits: Limits, on_progress: Callable[[str], None] | None = None) -> Execution:
        os.chown(job.out_dir, SANDBOX_UID, SANDBOX_UID) if os.geteuid() == 0 else os.chmod(job.out_dir, 0o777)
        marker = uuid.uuid4().hex
        env = {"PYTHONPATH": PROJECT_MOUNT, "PYTHONHASHSEED": job.hash_seed_env(), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONNOUSERSITE": "1", "PYTHONIOENCODING": "utf-8", "LANG": "C.UTF-8", "HOME": "/tmp",
               "OMP_NUM_THREADS": "1"}
        args = self._container_args(limits, marker, env)
        env_at, llm_at = ("/job/env" if job.env_dir else None), ("/job/llm/" + job.llm_socket.name if job.llm_socket else None)
        args["command"] = within_deadline(["python3", *job.runtime_args("/job/strategy", "/job/corpus.jsonl", "/out",
                                                                          env_at, llm_at)], limits)
        args["working_dir"] = "/out"
        args["mounts"] = self._runtime_mounts() + [
            Mount("/job/strategy", str(job.strategy_dir), type="bind", read_only=True),
            Mount("/job/corpus.jsonl", str(job.corpus_path), type="bind", read_only=True),
            Mount("/out", str(job.out_dir), type="bind", read_only=False),
        ] + ([Mount(env_at, str(job.env_dir), type="bind", read_only=True)] if env_at else []) \
          + ([Mount("/job/llm", str(job.llm_socket.parent), type="bind", read_only=True)] if llm_at else [])
        status, stdout, stderr, timed_out, reason, wall = self._run_container(args, limits, job.out_dir,
                                                                              on_progress=on_progress)
        code = None if timed_out else status.get("StatusCode")
        reason = reason or failure_reason(code, stderr, timed_out, limits.timeout_s)
        return Execution(executor=self.name, returncode=code, wall_s=wall, stdout=stdout, stderr=stderr,
                         timed_out=timed_out, reason=reason, isolation=self.describe())

    def run_command(self, command: str, workdir: Path, limits: Limits = Limits(timeout_s=120)) -> CommandResult:
        """One shell command of the code agent, over a plain checkout of the strategy files.

        `workdir` (no `.git`) is the only writable mount, at /work/strategy; the runtime packages
        are visible read-only so the agent can dry-run the strategy. Output is stdout and stderr
        interleaved, head and tail kept.
        """
        if (Path(workdir) / ".git").exists():
            raise RunFailed(f"{workdir} holds a .git: the agent works on a plain checkout only")
        if os.geteuid() == 0:
            for root, dirs, files in os.walk(workdir):
                for name in (root, *(os.path.join(root, f) for f in files)):
                    os.lchown(name, SANDBOX_UID, SANDBOX_UID)
        env = {"PYTHONPATH": PROJECT_MOUNT, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "LANG": "C.UTF-8", "HOME": "/tmp", "PATH": "/usr/local/bin:/usr/bin:/bin"}
        args = self._container_args(limits, uuid.uuid4().hex, env)
        args["command"] = within_deadline(["/bin/sh", "-c", command], limits)
        args["working_dir"] = "/work/strategy"
        args["mounts"] = self._runtime_mounts() + [Mount("/work/strategy", str(workdir), type="bind", read_only=False)]
        status, output, _, timed_out, reason, wall = self._run_container(args, limits, Path(workdir), combined=True)
        if timed_out:
            reason = f"timed out after {limits.timeout_s:g} s; killed"
        return CommandResult(None if timed_out else status.get("StatusCode"), output, timed_out, wall, reason)
