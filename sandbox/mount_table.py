"""What a process sandbox's mount table leaves writable, and the check every bubblewrap job
passes before its strategy starts.

`probe_bwrap` checks one sample sandbox; a job's own sandbox is made later, from the host's
mounts at that moment (a Docker container started in between adds its overlay, which bwrap binds
too), so each job checks its own table as well: run inside the sandbox as

    python3 -I -S sandbox/mount_table.py OK_FD SCRATCH... -- COMMAND...

it reads /proc/self/mountinfo and, when nothing outside the scratch places is writable, writes
one byte to OK_FD (the host's sign that the strategy is about to start), closes it and executes
COMMAND; otherwise it prints one sentence and exits with REFUSED, the strategy never started.
It imports nothing of the project.
"""
import os
import sys

REFUSED = 125
# What may be writable inside: bwrap's own tmpfs /tmp and /dev (device nodes, a private devpts)
SCRATCH_MOUNTS = frozenset({"/tmp", "/dev", "/dev/pts", "/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                            "/dev/urandom", "/dev/tty"})


def writable_mounts(mountinfo: str, scratch) -> list:
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
            (m["propagates"] or (m["writable"] and m["point"] not in SCRATCH_MOUNTS | set(scratch)))]


def main(argv: list) -> int:
    ok_fd, rest = int(argv[0]), argv[1:]
    split = rest.index("--")
    scratch, command = rest[:split], rest[split + 1:]
    with open("/proc/self/mountinfo") as f:
        leaks = writable_mounts(f.read(), scratch)
    if leaks:
        print(f"this sandbox leaves {leaks[0]} of the host writable (a mount bubblewrap could not make "
              "read-only); the strategy was not started", file=sys.stderr)
        return REFUSED
    os.write(ok_fd, b"1")
    os.close(ok_fd)
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
