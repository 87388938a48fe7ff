"""The project's package lock: `requirements.lock` at the repository root, the one source of truth.
(Called the package lock, not the environment lock: "environment" names the benchmarks in this project.)

Every package of the environment (the CPU torch wheel and the packages installed without their
declared dependencies included), pinned `name==version` with sha256 hashes: the hash of the file
pip picks on this kind of machine and of every file PyPI serves for that version. It is pip's own
hash-checking requirements format, so `pip install --no-deps --require-hashes -r requirements.lock`
installs exactly it (scripts/setup.sh) and pip-tools and uv read it too. The sandbox image's lock
(sandbox/image/requirements.lock) is derived from it (sandbox/image_lock.py).

Refreshing is one command, `bash scripts/lock.sh`: it resolves pyproject.toml's ranges in a
throw-away environment, writes this lock from it (`write`), reinstalls `.venv` from the lock,
derives the sandbox's lock and runs the tests that compare them.

    python -m sandbox.package_lock write --python VENV/bin/python   # the lock from that environment
    python -m sandbox.package_lock extras                           # installed here, not locked
    python -m sandbox.package_lock check                            # installed here == the lock?

Standard library only: setup.sh runs it before the project is installed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from base.lifetime import owned_temporary_directory

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOCK = PROJECT_ROOT / "requirements.lock"
PROJECT = "curateevo"
# Not locked: the installer itself (the venv's own), and the project (installed editable from the checkout).
UNLOCKED = {"pip", PROJECT}
PYPI_SIMPLE = "https://pypi.org/simple"


class LockError(Exception):
    """The lock is missing, malformed, or the environment differs from it (one sentence)."""


def normalise_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parse(text: str, where: Path | str = LOCK) -> dict[str, tuple[str, list[str]]]:
    """{normalised name: (version, [sha256, …])} of a hash-pinned requirements file."""
    pins: dict[str, tuple[str, list[str]]] = {}
    for number, line in enumerate(text.replace("\\\n", " ").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if not match:
            raise LockError(f"{where}: not a pinned requirement: {line[:80]} (regenerate it with "
                            "`bash scripts/lock.sh`)")
        pins[normalise_name(match[1])] = (match[2], re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return pins


def read(path: Path = LOCK) -> dict[str, tuple[str, list[str]]]:
    try:
        return parse(path.read_text(), path)
    except FileNotFoundError:
        raise LockError(f"{path} is missing: restore it from git or regenerate it with `bash scripts/lock.sh`") from None


def versions(path: Path = LOCK) -> dict[str, str]:
    """{normalised name: version} of the lock."""
    return {name: version for name, (version, _) in read(path).items()}


def lock_sha256(path: Path = LOCK) -> str | None:
    """sha256 of the lock file's bytes (None where the checkout has none)."""
    return sha256_file(path) if path.is_file() else None


def installed() -> dict[str, str]:
    """{normalised name: version} of the distributions this interpreter sees, less the unlocked ones
    and those a package vendors on a path of its own inside site-packages (Ray puts
    `ray/thirdparty_files`, with colorama and psutil, on sys.path when it is imported)."""
    import importlib.metadata
    import site

    sites = [Path(p).resolve() for p in site.getsitepackages() + [site.getusersitepackages()]]

    def vendored(entry: str) -> bool:   # a folder inside site-packages, not site-packages itself
        where = Path(entry or ".").resolve()
        return any(where != s and where.is_relative_to(s) for s in sites)

    paths = [p for p in sys.path if not vendored(p)]
    global _installed
    key = tuple((os.path.abspath(p or "."), _mtime_ns(p or ".")) for p in paths)
    if _installed is None or _installed[0] != key:   # read anew when a folder on the path gained or lost an entry
        found = {}
        for dist in importlib.metadata.distributions(path=paths):
            name = dist.metadata["Name"]
            if name and normalise_name(name) not in UNLOCKED:
                found[normalise_name(name)] = dist.version
        _installed = (key, dict(sorted(found.items())))
    return dict(_installed[1])


_installed: tuple[tuple, dict[str, str]] | None = None
"""`installed()`'s last (key, answer), keyed by its path folders and their modification times: every curation records
`lock_record()`, and reading the ~290 distributions' metadata took 0.185 s of each on 2 CPU cores. pip adds
and removes a distribution's .dist-info folder, which changes its site folder's time."""


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def differences(have: dict[str, str], locked: dict[str, str]) -> list[str]:
    """Readable differences between an environment and the lock, sorted by name."""
    out = []
    for name in sorted(set(have) | set(locked)):
        if name not in locked:
            out.append(f"{name} {have[name]} installed, not in the lock")
        elif name not in have:
            out.append(f"{name} {locked[name]} locked, not installed")
        elif have[name] != locked[name]:
            out.append(f"{name} {have[name]} installed, {locked[name]} locked")
    return out


def lock_record() -> dict:
    """What a run or an execution records of its environment: the lock's hash and whether the
    installed packages are the lock's (with the first differences when not)."""
    sha = lock_sha256()
    try:
        diff = differences(installed(), versions()) if sha else ["no requirements.lock"]
    except LockError as err:
        diff = [str(err)]
    return {"lock_sha256": sha, "matches_lock": not diff, "differences": diff[:20]}


def compare_with_lock(recorded: dict | None) -> list[str]:
    """Sentences saying how this environment differs from a recorded `lock_record()`."""
    if not recorded:
        return ["the run recorded no package lock (made before locks were recorded)"]
    now = lock_record()
    notes = []
    if recorded.get("lock_sha256") != now["lock_sha256"]:
        notes.append(f"requirements.lock is {str(now['lock_sha256'])[:12]} here, the run's was "
                     f"{str(recorded.get('lock_sha256'))[:12]}")
    if not now["matches_lock"]:
        notes.append("this environment differs from its lock: " + "; ".join(now["differences"][:5]))
    if recorded.get("matches_lock") is False:
        notes.append("the run's environment differed from its lock: " + "; ".join(recorded.get("differences", [])[:5]))
    return notes


# ---------------------------------------------------------------------------- writing the lock

def _run(cmd: list[str], **kwargs) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise LockError(f"{' '.join(cmd[:4])} … failed: {tail}")
    return done.stdout


def frozen(python: str) -> dict[str, str]:
    """{name: version} that `python`'s environment holds (pip freeze --all, less the unlocked)."""
    pins = {}
    for line in _run([python, "-m", "pip", "freeze", "--all", "--exclude-editable"]).splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$", line.strip())
        if match and normalise_name(match[1]) not in UNLOCKED:
            pins[normalise_name(match[1])] = match[2]
        elif line.strip() and not line.startswith("#") and not match:
            raise LockError(f"cannot lock {line.strip()!r}: only index or wheel installs can be locked")
    return dict(sorted(pins.items()))


def _version_of(filename: str, name: str) -> str | None:
    """The version a distribution file's name carries, for `name` (None: another project)."""
    stem = re.sub(r"\.(whl|tar\.gz|zip|tar\.bz2)$", "", filename)
    if filename.endswith(".whl"):
        parts = stem.split("-")
        return parts[1] if len(parts) >= 5 and normalise_name(parts[0]) == name else None
    head, _, version = stem.rpartition("-")
    return version if normalise_name(head) == name else None


def pypi_hashes(name: str, version: str) -> list[str]:
    """sha256 of every file PyPI serves for name==version (PEP 691 JSON simple API)."""
    request = urllib.request.Request(f"{PYPI_SIMPLE}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            files = json.load(answer)["files"]
    except OSError as err:
        if getattr(err, "code", None) == 404:
            return []   # not on PyPI (a local wheel such as torch's CPU build)
        raise LockError(f"PyPI's index did not answer for {name}: {err}") from None
    return sorted(f["hashes"]["sha256"] for f in files
                  if "sha256" in f.get("hashes", {}) and _version_of(f["filename"], name) == version)


def local_hashes(python: str, pins: dict[str, str]) -> dict[str, str]:
    """{name: sha256} of the file pip on this machine picks for each pin (its indexes, find-links)."""
    with owned_temporary_directory("lock") as tmp:
        reqs = Path(tmp) / "pins.txt"
        reqs.write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
        _run([python, "-m", "pip", "download", "--no-deps", "-q", "-d", str(Path(tmp) / "files"), "-r", str(reqs)])
        got = {}
        for path in (Path(tmp) / "files").iterdir():
            for name, version in pins.items():
                if _version_of(path.name, name) == version:
                    got[name] = sha256_file(path)
        missing = sorted(set(pins) - set(got))
        if missing:
            raise LockError(f"pip download gave no file for {', '.join(missing)}")
        return got


def render(pins: dict[str, str], hashes: dict[str, list[str]], header: str = "") -> str:
    lines = ["# The project's environment, every package pinned with its hashes: the one source of truth.",
             "# scripts/setup.sh installs exactly this (pip install --no-deps --require-hashes -r requirements.lock);",
             "# sandbox/image/requirements.lock is derived from it. Generated by `bash scripts/lock.sh`:",
             "# regenerate, do not edit." + (f" {header}" if header else ""), ""]
    for name, version in pins.items():
        lines.append(f"{name}=={version} \\")
        lines += [f"    --hash=sha256:{h} \\" for h in hashes[name][:-1]]
        lines.append(f"    --hash=sha256:{hashes[name][-1]}")
    return "\n".join(lines) + "\n"


def write(python: str, dest: Path = LOCK) -> dict[str, str]:
    pins = frozen(python)
    print(f"locking {len(pins)} packages from {python}", file=sys.stderr)
    here = local_hashes(python, pins)
    hashes = {}
    for i, (name, version) in enumerate(pins.items(), 1):
        hashes[name] = sorted({here[name], *pypi_hashes(name, version)})
        print(f"\r  hashes {i}/{len(pins)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    text = render(pins, hashes)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, dest)
    print(f"wrote {dest} ({len(pins)} packages, sha256 {lock_sha256(dest)[:12]})", file=sys.stderr)
    return pins


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.package_lock", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write requirements.lock from an environment (needs PyPI)")
    w.add_argument("--python", required=True, help="the interpreter of the environment to lock")
    sub.add_parser("extras", help="print the installed packages that the lock does not hold (to uninstall)")
    sub.add_parser("check", help="exit 1 with the differences when this environment is not the lock")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "write":
            write(args.python)
        elif args.cmd == "extras":
            locked = versions()
            print("\n".join(n for n in installed() if n not in locked))
        else:
            diff = differences(installed(), versions())
            if diff:
                print(f"this environment differs from {LOCK.name}: " + "; ".join(diff)
                      + " (run `bash scripts/setup.sh`)", file=sys.stderr)
                return 1
    except LockError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
