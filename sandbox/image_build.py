"""Building the sandbox image: one build's log and timed steps, the machine-wide build lock, the
registry probe, and the online route (`FROM python:3.11-slim`, `pip install --no-deps
--require-hashes` of the lock). The offline route is sandbox/image_offline.py; the whole build,
its verification and record are sandbox/image.py."""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import queue
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

from base.lifetime import owned_temporary_directory
from base.errors import RunFailed, UserError
from base.files import sha256_file
from sandbox.docker_engine import image_exists
from sandbox.image_lock import IMAGE_ENV, LABEL_PREFIX, LOCK, MOUNT_POINTS, RECIPE, Progress, cache_dir, recipe_sha256

PROBE_TIMEOUT_S = 60
HEARTBEAT_S = 20   # a step that runs longer says so this often: a first build takes minutes


class Build:
    """One build: a log file, timed steps, and a one-sentence failure naming the step and the log."""

    def __init__(self, tag: str, progress: Progress):
        self.tag, self.progress = tag, progress
        self.log_path = cache_dir() / f"build-{tag.split(':', 1)[1]}.log"
        self.log = open(self.log_path, "a", encoding="utf-8")
        self.steps: dict[str, float] = {}
        self.write(f"=== {datetime.datetime.now(datetime.timezone.utc).isoformat()} building {tag}")

    def write(self, text: str) -> None:
        self.log.write(text.rstrip("\n") + "\n")
        self.log.flush()

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.progress(f"sandbox image: {name}")
        self.write(f"--- {name}")
        t0 = time.monotonic()
        done = threading.Event()

        def heartbeat() -> None:
            while not done.wait(HEARTBEAT_S):
                self.progress(f"sandbox image: {name} … {time.monotonic() - t0:.0f} s so far (log: {self.log_path})")
        beating = threading.Thread(target=heartbeat, daemon=True)
        beating.start()
        try:
            yield
        except (RunFailed, UserError):
            raise
        except Exception as exc:  # subprocess, OSError, DockerException: one sentence with the log
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:200]
            self.write(f"FAILED: {exc!r}")
            raise RunFailed(f"building the sandbox image failed at '{name}': {detail} (log: {self.log_path})") from None
        finally:
            done.set()
            beating.join()
            self.steps[name] = round(time.monotonic() - t0, 2)

    def run(self, cmd: list[str], **kwargs) -> None:
        self.write("$ " + " ".join(map(str, cmd)))
        start = self.log.tell()
        done = subprocess.run(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kwargs)
        if done.returncode:
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                log.seek(start)
                said = [line.strip() for line in log.read().splitlines() if line.strip()]
            program = Path(str(cmd[0])).name if "pip" not in cmd[:3] else "pip"
            raise RuntimeError(f"{program} exited with code {done.returncode}"
                               + (f": {said[-1][:160]}" if said else ""))

    def close(self) -> None:
        self.log.close()


@contextlib.contextmanager
def one_build_at_a_time(progress: Progress | None = None) -> Iterator[None]:
    """One build at a time on this machine (the tests and an executor may ask together); a wait
    for another process's build is said, not silent."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "build.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress is not None:
                progress("sandbox image: another process is building it; waiting for that build")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def labels(route: str) -> dict[str, str]:
    return {LABEL_PREFIX + "lock_sha256": sha256_file(LOCK), LABEL_PREFIX + "recipe_sha256": recipe_sha256(),
            LABEL_PREFIX + "route": route}


def registry_answers(client, build: Build | None = None) -> bool:
    """Pull the online base; False when no registry answers. The usual offline failure (DNS) is
    immediate; a pull that reports nothing for PROBE_TIMEOUT_S is given up on (it may finish later)."""
    base = RECIPE["online"]["base"]
    if image_exists(client, base):
        return True
    events: queue.Queue = queue.Queue()

    def pull() -> None:
        try:
            repo, tag = base.rsplit(":", 1)
            for event in client.api.pull(repo, tag=tag, stream=True, decode=True):
                events.put(event)
            events.put({"done": True})
        except Exception as exc:  # DNS, refused, denied: all mean "take the offline route"
            events.put({"error": str(exc)})

    threading.Thread(target=pull, daemon=True, name="curateevo-probe-pull").start()
    while True:
        try:
            event = events.get(timeout=PROBE_TIMEOUT_S)
        except queue.Empty:
            if build:
                build.write(f"no registry: no answer to the pull of {base} in {PROBE_TIMEOUT_S} s")
            return False
        if event.get("error"):
            if build:
                build.write(f"no registry: {event['error']}")
            return False
        if event.get("done"):
            return image_exists(client, base)
        if build and event.get("status") and "progress" not in event:
            build.write(f"pull: {event.get('id', '')} {event['status']}")


def passwd_line() -> str:
    user = RECIPE["user"]
    return f"{user['name']}:x:{user['uid']}:{user['gid']}:curateevo sandbox:{user['home']}:/usr/sbin/nologin"


def group_line() -> str:
    return f"{RECIPE['user']['name']}:x:{RECIPE['user']['gid']}:"


def _dockerfile(route_labels: dict[str, str]) -> str:
    user = RECIPE["user"]
    env = " ".join(f"{k}={json.dumps(v)}" for k, v in IMAGE_ENV.items())
    label_args = " ".join(f"{k}={json.dumps(v)}" for k, v in route_labels.items())
    return "\n".join([
        f"FROM {RECIPE['online']['base']}",
        "COPY requirements.lock /tmp/requirements.lock",
        "RUN pip install --no-cache-dir --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: "
        "-r /tmp/requirements.lock && rm /tmp/requirements.lock && rm -rf /root/.cache",
        f"RUN echo '{passwd_line()}' >> /etc/passwd && echo '{group_line()}' >> /etc/group "
        f"&& mkdir -p {' '.join(MOUNT_POINTS)}",
        f"ENV {env}",
        f"LABEL {label_args}",
        f"USER {user['uid']}:{user['gid']}",
        f"WORKDIR {RECIPE['workdir']}",
        f"CMD {json.dumps(RECIPE['cmd'])}",
    ]) + "\n"


def build_online(client, build: Build) -> None:
    with build.step("docker build FROM " + RECIPE["online"]["base"]), \
            owned_temporary_directory("image") as ctx:
        shutil.copy(LOCK, Path(ctx) / "requirements.lock")
        (Path(ctx) / "Dockerfile").write_text(_dockerfile(labels("online")))
        last = ""
        for event in client.api.build(path=str(ctx), tag=build.tag, rm=True, forcerm=True, pull=False, decode=True):
            if "stream" in event:
                build.write(event["stream"])
                lines = [ln for ln in event["stream"].splitlines() if ln.strip().startswith("ERROR")]
                last = lines[-1].strip() if lines else last
            if "error" in event:
                code = re.search(r"returned a non-zero code: (\d+)", event["error"])
                raise RuntimeError((last or event["error"].splitlines()[0][:120])
                                   + (f" (exit code {code[1]})" if code else ""))
