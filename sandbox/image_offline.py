"""The offline route to the sandbox image, for machines no registry answers (shared/FIELD-NOTES.md):
`debootstrap --variant=minbase --include=python3 bookworm` (cached as a tarball), the locked wheels
downloaded by the host (cached) and installed with the host's pip into the rootfs, then
`docker import`. Needs root."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from base.errors import UserError
from base.files import sha256_file, sha256_bytes
from sandbox.image_build import Build, group_line, labels, passwd_line
from sandbox.image_lock import (IMAGE_ENV, LOCK, MOUNT_POINTS, RECIPE, cache_dir, canonical_bytes, parse_lock,
                                pip_command, platform_args)

DEBIAN_MIRROR = os.environ.get("CURATEEVO_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def _rootfs_tarball(build: Build) -> Path:
    """The debootstrapped base, made once per recipe and cached as a tarball."""
    spec = RECIPE["offline"]["debootstrap"]
    tarball = cache_dir() / f"rootfs-{sha256_bytes(canonical_bytes(spec))[:12]}.tar"
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


def _wheels(build: Build) -> Path:
    """The locked wheels, downloaded once into the cache (skipped when all are there already)."""
    folder = cache_dir() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    pins = parse_lock()
    have = {sha256_file(p) for p in folder.glob("*.whl")}
    if all(set(hashes) & have for _, hashes in pins.values()):
        build.write(f"wheels from cache: {folder}")
        return folder
    with build.step(f"download the {len(pins)} locked wheels"):
        build.run(pip_command("download", "--require-hashes", "--no-deps", *platform_args(), "-d", str(folder),
                       "-r", str(LOCK)))
    return folder


def build_offline(client, build: Build) -> None:
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
            build.run(pip_command("install", "--no-index", "--find-links", str(wheels), "--no-deps", "--require-hashes",
                           *platform_args(), "--no-compile", "--target", str(site), "-r", str(LOCK)))
            shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts with the host's interpreter
        with build.step("compile site-packages with the image's python3"):
            build.run(["chroot", str(root), "/usr/bin/python3", "-m", "compileall", "-q", offline["site_packages"]])
        with build.step(f"add user {user['name']} ({user['uid']}), mount points and python links"):
            with open(root / "etc/passwd", "a") as f:
                f.write(passwd_line() + "\n")
            with open(root / "etc/group", "a") as f:
                f.write(group_line() + "\n")
            for point in MOUNT_POINTS:
                (root / point.lstrip("/")).mkdir(mode=0o755, parents=True, exist_ok=True)
            for name in ("python3", "python"):
                link = root / "usr/local/bin" / name
                if not link.exists():
                    link.symlink_to("/usr/bin/python3")
        with build.step("docker import"):
            changes = [f"ENV {k}={json.dumps(v)}" for k, v in IMAGE_ENV.items()]
            changes += [f"LABEL {k}={json.dumps(v)}" for k, v in labels("offline").items()]
            changes += [f"USER {user['uid']}:{user['gid']}", f"WORKDIR {RECIPE['workdir']}",
                        f"CMD {json.dumps(RECIPE['cmd'])}"]
            build.write("$ tar -C ROOTFS -c . | docker import " + " ".join(f"--change {c!r}" for c in changes)
                        + f" - {build.tag}")
            # Through the SDK (the engine the rest of the build queries, whatever the CLI's context).
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
