"""Strategy files: what a strategy is on disk and in a commit, read on the host's terms.

A strategy is a directory of regular files: `strategy.py`, helper `*.py` modules beside it, and
`inputs/*.json`. Candidate files come from untrusted places: only regular files are read (opened
with O_NOFOLLOW and checked with fstat); `.git*` names, links, pipes, devices, control
characters in names and oversized files are refused with one sentence naming the path.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Mapping

from base.errors import UserError
from base.schemas import canonical_json

MAX_FILE_BYTES = 1 << 20  # one strategy module
MAX_INPUT_BYTES = 16 << 20  # one inputs/*.json (a profile can be large)
MAX_FILES = 256
# Interpreter and tool byproducts a candidate directory may hold; never committed.
_SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_INPUT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.json")



def strategy_files(path) -> dict[str, bytes]:
    """The strategy files of a directory (or of `DIR/strategy.py`): its `*.py` files, not
    recursive, plus `inputs/*.json`; anything else in it is ignored. A selected name that is a
    link, a pipe, a device, a `.git*` name or over the size cap is refused (UserError)."""
    root = Path(path)
    if root.is_file():
        if root.name != "strategy.py":
            raise UserError(f"{root} is not a strategy: name a strategy directory or its strategy.py.")
        root = root.parent
    files = _scan(root, strict=False)
    if "strategy.py" not in files:
        raise UserError(f"{root} has no strategy.py, so it is not a strategy directory.")
    return files


def _scan(root: Path, *, strict: bool) -> dict[str, bytes]:
    """Top-level `*.py` and `inputs/*.json` of `root`, read race-free through directory fds.
    strict (a candidate's directory): anything else is refused, except `.git` and caches."""
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        raise UserError(f"strategy directory {root} does not exist or is not a directory.") from None
    files: dict[str, bytes] = {}
    try:
        for name, mode in _entries(root_fd):
            shown = root / name
            if name == ".git" or (name in _SKIPPED_DIRS and stat.S_ISDIR(mode)):
                continue
            if name == "inputs":
                if not stat.S_ISDIR(mode):
                    raise UserError(f"{shown} is {_kind(mode)}; inputs/ must be a directory.")
                files.update(_scan_inputs(root_fd, shown, strict=strict))
            elif name.endswith(".py") or strict:
                _check_name(name, shown)
                if not stat.S_ISREG(mode):
                    raise UserError(f"{shown} is {_kind(mode)}; only regular files can be strategy files.")
                if not name.endswith(".py"):
                    raise UserError(f"{shown} is not a strategy file: a strategy is *.py modules beside "
                                    "strategy.py plus inputs/*.json.")
                files[name] = _read_regular(root_fd, name, shown, MAX_FILE_BYTES)
    finally:
        os.close(root_fd)
    if len(files) > MAX_FILES:
        raise UserError(f"{root} holds {len(files)} strategy files, over the limit of {MAX_FILES}.")
    return files


def _scan_inputs(root_fd: int, shown_dir: Path, *, strict: bool) -> dict[str, bytes]:
    try:
        fd = os.open("inputs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
    except OSError:
        raise UserError(f"{shown_dir} is not a directory (a link or it vanished); refusing it.") from None
    files = {}
    try:
        for name, mode in _entries(fd):
            shown = shown_dir / name
            if not name.endswith(".json") and not strict:
                continue
            _check_name(name, shown)
            if not stat.S_ISREG(mode):
                raise UserError(f"{shown} is {_kind(mode)}; only regular files can be strategy inputs.")
            if not _INPUT_NAME.fullmatch(name):
                raise UserError(f"{shown} is not a strategy input: inputs/ holds only *.json files.")
            files[f"inputs/{name}"] = _read_regular(fd, name, shown, MAX_INPUT_BYTES)
    finally:
        os.close(fd)
    return files


def _entries(dir_fd: int) -> list[tuple[str, int]]:
    with os.scandir(dir_fd) as it:
        return sorted((e.name, e.stat(follow_symlinks=False).st_mode) for e in it)


def _check_name(name: str, shown: Path) -> None:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{shown!s} has a file name that is not UTF-8; refusing it.") from None
    if any(ord(c) < 32 or c in "\\\x7f" for c in name):
        raise UserError(f"{shown!r} has control characters or a backslash in its name; refusing it.")
    if name.lower().startswith(".git"):
        raise UserError(f"{shown} is a .git* file, which a strategy may not contain.")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _read_regular(dir_fd: int, name: str, shown: Path, cap: int) -> bytes:
    """Read `name` only if it is (still) a regular file within the cap: no link is followed and
    a pipe is never waited on."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise UserError(f"cannot read {shown}: {why}; only regular files can be strategy files.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{shown} is {_kind(st.st_mode)}; only regular files can be strategy files.")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise UserError(f"{shown} is larger than the {cap}-byte limit for a strategy file.")
    return data


def inputs_files(inputs: Mapping[str, object]) -> dict[str, bytes]:
    """`inputs/<name>.json` in canonical JSON for each entry (`"signals"` or `"signals.json"`)."""
    out = {}
    for key, value in inputs.items():
        name = key if str(key).endswith(".json") else f"{key}.json"
        if not isinstance(key, str) or not _INPUT_NAME.fullmatch(name):
            raise UserError(f"input name {key!r} is not a plain file name (letters, digits, _ . -).")
        try:
            out[f"inputs/{name}"] = (canonical_json(value) + "\n").encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise UserError(f"input {name} cannot be written as canonical JSON: {exc}.") from None
    return out


def check_tree_path(rel: str, rev: str) -> None:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") or p.lower().startswith(".git") or "\\" in p
                                  for p in parts):
        raise UserError(f"revision {rev} holds the path {rel!r}, which escapes or names .git; refusing it.")


# ---------------------------------------------------------------------------------------------


def check_files(files: Mapping[str, bytes], where: str = "the candidate") -> dict[str, bytes]:
    """`files` (path → bytes) if they form a strategy: `strategy.py`, top-level `*.py` modules and
    `inputs/*.json`, each within its size cap; else UserError naming the path."""
    if not isinstance(files, Mapping) or "strategy.py" not in files:
        raise UserError(f"{where} has no strategy.py, so it is not a strategy.")
    if len(files) > MAX_FILES:
        raise UserError(f"{where} holds {len(files)} files, over the limit of {MAX_FILES}.")
    out = {}
    for rel, data in sorted(files.items()):
        if not isinstance(rel, str) or not isinstance(data, bytes):
            raise UserError(f"{where}: {rel!r} is not a path with bytes.")
        check_tree_path(rel, where)
        folder, _, name = rel.rpartition("/")
        _check_name(name, Path(rel))
        if folder == "" and name.endswith(".py"):
            cap = MAX_FILE_BYTES
        elif folder == "inputs" and _INPUT_NAME.fullmatch(name):
            cap = MAX_INPUT_BYTES
        else:
            raise UserError(f"{where}: {rel} is not a strategy file: a strategy is *.py modules beside "
                            "strategy.py plus inputs/*.json.")
        if len(data) > cap:
            raise UserError(f"{where}: {rel} is larger than the {cap}-byte limit for a strategy file.")
        out[rel] = data
    return out
