"""A generator run on another core: a forked child process sends its items back one at a time.

    with Worker(produce, *args) as worker:   # the child runs `for item in produce(*args)`
        item = worker.next(timeout_s)         # the next item, or LOST

or, when the child makes more than a pipe holds before the parent is free to read (a pipe takes
64 KiB; a child sending into a full one waits for its reader, and the halves stop running at once):

    with Spooled(produce, *args) as spooled:      # the child writes each item to a scratch file
        ...                                       # this process's own work meanwhile
        items = spooled.items(timeout_s)          # the child's items in order, read back; or LOST

The child is forked, so it starts at once with the parent's memory (modules imported, caches
warm) and needs nothing pickled but its items. The parent never depends on it: `next` gives LOST
when the child died, raised, closed the pipe or sent nothing for `timeout_s` (then it is killed),
and the caller does the rest of the work itself. Items are pickled over a pipe, so they should be
small beside the work that made them. Leaving the `with` kills a child still running, and the
child is killed by the kernel when its parent dies (PR_SET_PDEATHSIG), even by SIGKILL.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import time
from typing import Any, Callable, Iterator

from base.files import free_blocks
from base.lifetime import die_with_parent, owned_temporary_folder

LOST = object()   # what `next` gives once the child cannot be relied on


def available() -> bool:
    """Whether a second core and `fork` are there to use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:   # no affinity call here: whatever the machine has
        cores = os.cpu_count() or 1
    return (cores >= 2 and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)   # a daemonic process may have no children


def _serve(conn, parent: int, produce: Callable[..., Iterator], args: tuple) -> None:
    die_with_parent(parent)   # no prctl here: the `with` still ends the child
    try:
        for item in produce(*args):
            conn.send(("item", item))
        conn.send(("end", None))
    except BaseException as exc:   # reported, never printed: the parent does the work again
        try:
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        except (OSError, ValueError):
            pass
    finally:
        conn.close()


class Worker:
    def __init__(self, produce: Callable[..., Iterator], *args: Any):
        context = multiprocessing.get_context("fork")
        self.conn, child_end = context.Pipe(duplex=False)
        self.process = context.Process(target=_serve, args=(child_end, os.getpid(), produce, args), daemon=True,
                                       name="curateevo-worker")
        self.lost: str | None = None   # why the child was given up on, once it was
        try:
            self.process.start()
        except OSError as exc:   # no process to be had (EAGAIN, ENOMEM): the caller does it all
            self.lost = f"it could not be started ({exc.strerror})"
            self.conn.close()
        child_end.close()

    def next(self, timeout_s: float) -> Any:
        """The child's next item; LOST (and `lost` says why) when it cannot give one."""
        if self.lost is not None:
            return LOST
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                ready = self.conn.poll(max(0.0, min(left, 0.5)))
                if ready:
                    kind, value = self.conn.recv()
                    if kind == "item":
                        return value
                    return self._give_up("it ended early" if kind == "end" else f"it failed ({value})")
            except (EOFError, OSError):
                return self._give_up(f"it exited (code {self.process.exitcode})")
            if left <= 0:
                return self._give_up(f"it sent nothing for {timeout_s:.0f} s")
            if not self.process.is_alive() and not self.conn.poll(0):
                return self._give_up(f"it exited (code {self.process.exitcode})")

    def _give_up(self, why: str) -> Any:
        self.lost = why
        self.close()
        return LOST

    def close(self) -> None:
        if self.process.pid is None:
            return
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        if self.lost is None:
            self.close()


SPOOL_FREE_BYTES = 64 << 20   # the spool's disk is given back this much at a time as it is read


class Spooled:
    """A `Worker` whose items wait in a scratch file (see the module docstring): the child writes
    them all, pickled, and then sends their count; the parent reads them back in order, giving the
    file's disk back as it goes (base.files.free_blocks). The file goes with the `with`."""

    def __init__(self, produce: Callable[..., Iterator], *args: Any):
        self.folder = owned_temporary_folder("spool")
        self.path = os.path.join(self.folder, "items.pickle")
        self.worker = Worker(_spool, self.path, produce, args)

    def items(self, timeout_s: float) -> Iterator[Any] | Any:
        """The child's items in order once it has made them all; LOST (and `lost` says why) when
        it failed, was lost, or took longer than `timeout_s`."""
        count = self.worker.next(timeout_s)
        return LOST if count is LOST else self._read(count)

    @property
    def lost(self) -> str | None:
        return self.worker.lost

    def _read(self, count: int) -> Iterator[Any]:
        with open(self.path, "r+b") as f:
            freed = 0
            for _ in range(count):
                yield pickle.load(f)
                read = f.tell() // 4096 * 4096
                if read - freed >= SPOOL_FREE_BYTES:
                    free_blocks(f.fileno(), freed, read)
                    freed = read

    def __enter__(self) -> "Spooled":
        return self

    def __exit__(self, *exc) -> None:
        self.worker.__exit__(*exc)
        shutil.rmtree(self.folder, ignore_errors=True)


def _spool(path: str, produce: Callable[..., Iterator], args: tuple) -> Iterator[int]:
    """In the forked child: every item of `produce(*args)` pickled into `path`, then their count."""
    count = 0
    with open(path, "wb") as out:
        for item in produce(*args):
            pickle.dump(item, out, protocol=pickle.HIGHEST_PROTOCOL)
            count += 1
    yield count
