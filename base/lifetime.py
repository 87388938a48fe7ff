"""Processes that end with the process that started them: a host killed outright (SIGKILL runs no
`finally`) leaves no worker running (Linux; elsewhere the callers' own `finally` is all there is).

`die_with_parent` asks the kernel to SIGKILL the calling process when its parent ends
(PR_SET_PDEATHSIG): the sandbox's forked checker halves, a fresh training child and the training
forkserver (trainer.warm) call it. The parent, for the kernel, is the thread that forked: each
caller forks from the thread that waits on the child, so the child never outlives its waiter.

What a killed process leaves on disk carries its owner: `claim` writes `owner_id` (boot id, pid,
start time) into a folder, and sandbox.leftovers removes folders whose owner is gone
(`owner_gone`). `owned_temporary_directory` is the temporary folder every curateevo process makes
in $TMPDIR (`curateevo-<what>-*`), marked so.
"""
from __future__ import annotations

import ctypes
import os
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

PR_SET_PDEATHSIG = 1
OWNER_FILE = ".curateevo-owner"   # in a folder: the owner_id of the process it belongs to
TEMP_PREFIX = "curateevo-"   # every folder a curateevo process makes in $TMPDIR: curateevo-<what>-*


def die_with_parent(parent: int | None = None) -> bool:
    """SIGKILL this process when its parent ends; when `parent` (the pid it was started by) is no
    longer the parent, it has ended already and this process exits now. False where the kernel
    offers no parent-death signal (not Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:   # the parent died before the call
        os._exit(128 + signal.SIGKILL)
    return True


def start_ticks(pid: int | str = "self") -> int:
    """When a process started, in clock ticks after boot (`/proc/PID/stat` field 22, read after the
    parenthesised command name); OSError where there is no such process or no /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def owner_id(pid: int | None = None) -> str | None:
    """`boot id:pid:start time` of a process (this one by default), None when it is gone: what
    carries it is left over once this no longer names a live process."""
    pid = os.getpid() if pid is None else pid
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}:{pid}:{start_ticks(pid)}"
    except OSError:
        return None


def owner_gone(owner: str) -> bool:
    """True when `owner` (an `owner_id`) names no live process; a malformed one counts as gone."""
    parts = owner.split(":")
    return not (len(parts) == 3 and parts[1].isdigit() and owner_id(int(parts[1])) == owner)


def claim(folder: Path) -> None:
    """Mark `folder` as this process's, so the next command removes it if this one is killed."""
    (Path(folder) / OWNER_FILE).write_text(owner_id() or "")


def release(folder: Path) -> None:
    """Take this process's mark off `folder`: it is kept for the user, no command's to remove."""
    (Path(folder) / OWNER_FILE).unlink(missing_ok=True)


def owned_temporary_folder(what: str) -> Path:
    """A new folder `curateevo-<what>-*` in $TMPDIR, claimed: the caller removes it; the next
    curateevo command does if this process is killed first."""
    folder = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{what}-"))
    claim(folder)
    return folder


@contextmanager
def owned_temporary_directory(what: str) -> Iterator[Path]:
    """`tempfile.TemporaryDirectory` as `owned_temporary_folder`: removed on leaving, or by the
    next curateevo command if this process is killed inside."""
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{what}-") as tmp:
        claim(Path(tmp))
        yield Path(tmp)
