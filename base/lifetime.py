"""Processes that end with the process that started them: a host killed outright (SIGKILL runs no
`finally`) leaves no worker running (Linux; elsewhere the callers' own `finally` is all there is).

`die_with_parent` asks the kernel to SIGKILL the calling process when its parent ends
(PR_SET_PDEATHSIG): the sandbox's forked checker halves, a fresh training child and the training
forkserver (trainer.warm) call it. The parent, for the kernel, is the thread that forked: each
caller forks from the thread that waits on the child, so the child never outlives its waiter.
"""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


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
