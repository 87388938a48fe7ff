"""Imported first by trainer.warm's forkserver (warm.PRELOAD): the forkserver dies with the process
that started it. multiprocessing's forkserver exits when its `alive` pipe closes, but a process the
host forked afterwards holds that pipe's end too; the parent-death signal does not depend on it.
Anywhere else (no PARENT_ENV in the environment) importing this does nothing."""
from __future__ import annotations

import os

from base.lifetime import die_with_parent

PARENT_ENV = "CURATEEVO_FORKSERVER_PARENT"
"""The pid of the process that starts the forkserver (set for its start only, by trainer.warm)."""

if os.environ.get(PARENT_ENV, "").isdigit():
    die_with_parent(int(os.environ.pop(PARENT_ENV)))
