"""What a curateevo process killed with SIGKILL leaves behind, and its removal by the next one.

A process that is killed outright runs no `finally`: its job folder (strategy copy, canonical
corpus, output, LLM socket) stays in the temporary directory, its half-checked stage beside the
output folder, its container in the engine (ended within seconds by its init,
`sandbox/container_init.py`, when the engine closes the stdin the dead host held attached). Its
training processes (trainer.warm's forkserver and the children forked from it, or a fresh
`python -m trainer.worker`) die with it by a parent-death signal (base.lifetime); one that
escaped it is still marked. Its other temporary folders (a replay's, a Ray task's, a code agent's:
base.lifetime.owned_temporary_directory) stay too. Each of them carries its owner's `owner_id` (a
file in a folder, a label on a container, OWNER_ENV in a process's environment); the next curateevo
command removes those whose owner is gone (`reap_leftovers`). Anything without an owner mark, or
whose owner lives, stays.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from base.lifetime import OWNER_FILE, TEMP_PREFIX, claim, owner_gone, owner_id, start_ticks  # noqa: F401 (this module's names too)
from corpora.stored import SPILL_PREFIX

JOB = "job"   # base.lifetime.owned_temporary_folder's `what` for a curation job's folder
JOB_PREFIX = f"{TEMP_PREFIX}{JOB}-"
OWNER_LABEL = "curateevo.owner"   # a container's owner_id()
OWNER_ENV = "CURATEEVO_OWNER"   # a training process's owner_id(), in the environment it started with


def reap_folders(folders: Iterable[Path]) -> int:
    """Remove the folders whose owner mark names a dead process; returns how many."""
    removed = 0
    for folder in folders:
        try:
            owner = (folder / OWNER_FILE).read_text()
        except (OSError, UnicodeDecodeError):
            continue   # no mark (not ours, or older than the marks): left alone
        if owner_gone(owner):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def reap_job_dirs(tmp: str | Path | None = None) -> int:
    """Job folders (`curateevo-job-*` in the temporary directory) of killed processes."""
    return reap_folders(Path(tmp or tempfile.gettempdir()).glob(JOB_PREFIX + "*"))


def reap_record_dirs(tmp: str | Path | None = None) -> int:
    """Loaded corpora's record folders (`curateevo-records-*`, corpora.stored) of killed processes."""
    return reap_folders(Path(tmp or tempfile.gettempdir()).glob(SPILL_PREFIX + "*"))


def reap_temporary_dirs(tmp: str | Path | None = None) -> int:
    """The other marked temporary folders (`curateevo-<what>-*`: a replay's, a Ray task's stage, a
    code agent's checkout, …) of killed processes."""
    ours = Path(tmp or tempfile.gettempdir()).glob(TEMP_PREFIX + "*")
    return reap_folders(p for p in sorted(ours) if not p.name.startswith((JOB_PREFIX, SPILL_PREFIX)))


def reap_orphans(client) -> int:
    """Remove the containers whose owning curateevo process is gone (killed with SIGKILL, say);
    containers of live processes, and containers made by code without the owner label, stay."""
    from docker.errors import DockerException

    removed = 0
    try:
        containers = client.containers.list(all=True, filters={"label": OWNER_LABEL})
    except DockerException:
        return 0
    for container in containers:
        if not owner_gone(container.labels.get(OWNER_LABEL, "")):
            continue   # its owner is alive
        try:
            container.remove(force=True)
            removed += 1
        except DockerException:   # removed meanwhile: the next command tries again
            continue
    return removed


def reap_containers() -> int:
    """Containers of killed processes, when a Docker engine answers at once (none: nothing to do)."""
    if not (os.environ.get("DOCKER_HOST") or os.path.exists("/var/run/docker.sock")):
        return 0
    from base.errors import RunFailed
    from sandbox.docker_engine import docker_client

    try:
        client = docker_client(timeout=5)
    except RunFailed:
        return 0
    try:
        return reap_orphans(client)
    finally:
        client.close()


def process_owner(pid: int | str) -> str | None:
    """OWNER_ENV of the environment process `pid` started with (its /proc environ); None without
    one, or when it cannot be read (another user's, or gone)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    mark = (OWNER_ENV + "=").encode()
    return next((v[len(mark):].decode(errors="replace") for v in environ.split(b"\0") if v.startswith(mark)), None)


def reap_processes(proc: Path = Path("/proc")) -> int:
    """SIGKILL the processes whose owner mark (OWNER_ENV) names a dead process; returns how many."""
    import signal

    removed = 0
    for entry in sorted(proc.glob("[0-9]*"), key=lambda p: int(p.name)) if proc.is_dir() else ():
        owner = process_owner(entry.name)
        if not owner or int(entry.name) == os.getpid() or not owner_gone(owner):
            continue
        try:
            os.kill(int(entry.name), signal.SIGKILL)
            removed += 1
        except OSError:   # ended meanwhile, or not ours to end
            continue
    return removed


def reap_leftovers() -> str | None:
    """What killed curateevo processes left (containers, job folders, training processes), removed;
    one line saying so, or None when there was nothing."""
    counts = {"training process(es)": reap_processes(), "container(s)": reap_containers(),
              "job folder(s)": reap_job_dirs(), "corpus record folder(s)": reap_record_dirs(),
              "temporary folder(s)": reap_temporary_dirs()}
    said = [f"{n} {what}" for what, n in counts.items() if n]
    if not said:
        return None
    return (f"removed {', '.join(said[:-1]) + ' and ' if len(said) > 1 else ''}{said[-1]} left by a curateevo "
            "process that was killed")
