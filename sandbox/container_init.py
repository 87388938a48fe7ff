"""The Docker sandbox's init (PID 1 of every container): it runs the job and ends the container
within a moment of its host's death.

The host attaches to the container's stdin (opened once: `StdinOnce`) and never writes to it;
the engine closes that stdin when the host's connection drops, which the kernel does when the
host dies, SIGKILL included. End of file on stdin therefore means nobody is left to read the
candidate's output, and the init exits, which ends every process of the container's PID
namespace. As PID 1 it receives no signal a process of the container sends (SIGSTOP and SIGKILL
included), and it makes itself non-dumpable, so a candidate running as the same user can neither
ptrace it nor open its descriptors under /proc/1. It also reaps orphans, as an init must, and
exits with the job's status (128 + N for a job killed by signal N), as docker-init does.

Run as a file (`python3 -I -S container_init.py COMMAND...`): it imports nothing of the project.
"""
import ctypes
import os
import select
import signal
import sys

HOST_GONE = 137   # the status of a container ended for its host's death (as if killed)


def _undumpable() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


def _status(wait_status: int) -> int:
    return os.waitstatus_to_exitcode(wait_status) if os.WIFEXITED(wait_status) else 128 + os.WTERMSIG(wait_status)


def main(command: list[str]) -> int:
    _undumpable()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)   # a child's end wakes the select below
    devnull = os.open(os.devnull, os.O_RDONLY)
    job = os.fork()
    if job == 0:   # the job: stdin is nothing of the host's
        os.dup2(devnull, 0)
        os.close(wake_r), os.close(wake_w)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"container_init: cannot run {command[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
    watched = [0, wake_r]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if 0 in ready:
            try:
                data = os.read(0, 65536)
            except OSError:
                data = b""
            if not data:   # the host is gone: end the container (the kernel kills the namespace)
                os._exit(HOST_GONE)
        if wake_r in ready:
            os.read(wake_r, 4096)
        while True:   # reap every ended child, orphans included
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == job:
                return _status(wait_status)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("container_init: give the command to run")
    sys.exit(main(sys.argv[1:]))
