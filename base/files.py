"""File helpers every package may use: atomic writes (a reader sees the old file or the new one,
never half of either), JSON reading, content hashes of files and trees, the empty-folder check,
the user cache, and giving back the disk of a scratch file's bytes already read (`free_blocks`)."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import queue
import tempfile
import threading
from pathlib import Path
from typing import Any, Container, Iterable, Iterator, Mapping

from base.errors import UserError


CACHE_VARIABLE = "CURATEEVO_CACHE"


def cache_root() -> Path:
    """The user cache every command shares outside a run's folder (converted models, the leakage
    index of the benchmarks' gold, sandbox image build records): `$CURATEEVO_CACHE`, else
    `$XDG_CACHE_HOME/curateevo`, else `~/.cache/curateevo`."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "curateevo"


def atomic_write(path: str | os.PathLike, data: bytes | str, mode: int = 0o644) -> None:
    """Write `data` to a temp file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_text(obj: Any) -> str:
    """Readable, stable JSON for files people open: sorted keys, two-space indent, no NaN."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=2, allow_nan=False) + "\n"


def atomic_json(path: str | os.PathLike, obj: Any) -> bytes:
    """Write `obj` as `json_text` atomically; returns the bytes written (to hash them)."""
    data = json_text(obj).encode("utf-8")
    atomic_write(path, data)
    return data


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def iter_jsonl(path: str | os.PathLike, what: str = "JSONL",
               only: Container[int] | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSONL file, in order; with `only`, of the
    non-blank lines at those places (0-based; the others are not decoded). A missing or unreadable
    file, or a line that is not JSON, is one UserError naming the file (and the line)."""
    try:
        with open(path, encoding="utf-8") as f:
            place = -1
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                place += 1
                if only is not None and place not in only:
                    continue
                try:
                    value = json.loads(line)
                except ValueError as exc:
                    raise UserError(f"{path}:{n}: not JSON ({getattr(exc, 'msg', exc)})") from None
                yield n, value
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what} file") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a {what} JSONL file ({exc.__class__.__name__})") from None


def count_jsonl(path: str | os.PathLike, what: str = "JSONL") -> int:
    """Non-blank lines of a JSONL file, counted without decoding them (a missing file: iter_jsonl's UserError)."""
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what} file") from None


def read_jsonl(path: str | os.PathLike) -> list:
    """The JSON values of a JSONL file, one per non-blank line, in order."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --------------------------------------------------------------------------------------------
# content hashes


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """sha256 hex of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x01, 0x02   # linux/falloc.h


def free_blocks(fd: int, start: int, end: int) -> bool:
    """Give the disk back for bytes [start, end) of the file open for writing as `fd`, its size kept
    (those bytes then read as zeros): Linux's fallocate(PUNCH_HOLE), which `os` does not offer, so
    through libc. For a scratch file read front to back — what has been read is freed as the reading
    goes, so a copy of the file never doubles its disk. False (and nothing changed) where the system
    or the filesystem cannot, or `fd` is not open for writing."""
    global _fallocate
    if end <= start:
        return False
    if _fallocate is None:
        _fallocate = _libc_fallocate()
    if not _fallocate:
        return False
    import ctypes

    if _fallocate[0](fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, end - start) == 0:
        return True
    if ctypes.get_errno() in (errno.EOPNOTSUPP, errno.ENOSYS):   # this system never will
        _fallocate = []
    return False


def free_file(fd: int) -> bool:
    """`free_blocks` of the whole file open for writing as `fd`, its last partial block too."""
    return free_blocks(fd, 0, -(-os.fstat(fd).st_size // 4096) * 4096)


def _libc_fallocate() -> list:
    """[libc's fallocate], or [] where there is none (not Linux)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return []
    try:
        call = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return []
    call.argtypes, call.restype = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64], ctypes.c_int
    return [call]


_fallocate: list | None = None   # [libc's fallocate] once looked up; [] where there is none


def scratch_writer(fd: int) -> int | None:
    """A second descriptor, open for writing, on the file `fd` reads — for `free_blocks` on a file a
    process read only to copy it — or None where it cannot be had or the file has another name too
    (a hard link: its bytes are someone else's)."""
    try:
        if os.fstat(fd).st_nlink != 1:
            return None
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
    except OSError:
        return None


class HashingWriter:
    """A file written and hashed (sha256) block by block in a thread of its own: hashing and
    writing release the GIL, so they run beside the caller's work. Memory: at most `queued`
    blocks of about `block` bytes wait. A failure is raised in the caller (at a later `write`,
    or on leaving the `with`); leaving it on an exception stops the thread and closes the file.

        with HashingWriter(path) as out:
            out.write(b"...")
        out.hexdigest()
    """

    def __init__(self, path: str | os.PathLike, block: int = 1 << 20, queued: int = 4):
        self.file = open(path, "wb")
        self.digest, self.block = hashlib.sha256(), block
        self.pending: list[bytes] = []
        self.size, self.error = 0, None
        self.queue: queue.Queue = queue.Queue(maxsize=queued)
        self.thread = threading.Thread(target=self._drain, name="hashing-writer", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while (data := self.queue.get()) is not None:
            if self.error is None:
                try:
                    if isinstance(data, tuple):   # a file to append (`write_file`): (path, scratch)
                        self._append(*data)
                    else:
                        self.digest.update(data)
                        self.file.write(data)
                except BaseException as exc:   # raised in the caller
                    self.error = exc

    def _append(self, path: str, scratch: bool) -> None:
        with open(path, "r+b" if scratch else "rb") as src:
            at = 0   # through this process: faster here than copy_file_range
            for block in iter(lambda: src.read(1 << 22), b""):
                self.digest.update(block)
                self.file.write(block)
                if scratch:   # what is copied is given back
                    free_blocks(src.fileno(), at, at + len(block))
                at += len(block)

    def _hand_over(self) -> None:
        if self.error is not None:
            raise self.error
        if self.pending:
            self.queue.put(b"".join(self.pending))
            self.pending, self.size = [], 0

    def write_file(self, path: str | os.PathLike, scratch: bool = False) -> None:
        """Appends the bytes of the file at `path`, which must stay as it is until the `with` ends;
        `scratch`: a file nobody reads again, whose disk is given back as it is copied (`free_blocks`)."""
        self._hand_over()
        self.queue.put((os.fspath(path), scratch))

    def write(self, data: bytes) -> None:
        self.pending.append(data)
        self.size += len(data)
        if self.size >= self.block:
            self._hand_over()

    def __enter__(self) -> "HashingWriter":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if kind is None:
                self._hand_over()
        finally:
            self.queue.put(None)
            self.thread.join()
            self.file.close()
        if kind is None and self.error is not None:
            raise self.error

    def hexdigest(self) -> str:
        return self.digest.hexdigest()


def _listing_sha256(digests: Iterable[tuple[str, str]]) -> str:
    return sha256_bytes("".join(f"{p}\0{d}\n" for p, d in digests).encode())


def sha256_files(files: Mapping[str, bytes]) -> str:
    """One hash for files held in memory as {relative path: bytes}: the sha256 of the lines
    `path\0<sha256 of the bytes>\n` in sorted path order."""
    return _listing_sha256((p, sha256_bytes(files[p])) for p in sorted(files))


def sha256_tree(path: str | os.PathLike) -> str:
    """One hash for a directory: the sha256 of the lines `relative/path\0<sha256_file>\n` of its
    regular files (links left out), ordered by path components (`a/c` before `a.b`, as Paths sort)."""
    path = Path(path)
    found = sorted(f for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    return _listing_sha256((f.relative_to(path).as_posix(), sha256_file(f)) for f in found)


def sha256_path(path: str | os.PathLike) -> str:
    """sha256 of a file, or of a directory tree (`sha256_tree`)."""
    return sha256_tree(path) if Path(path).is_dir() else sha256_file(path)


# --------------------------------------------------------------------------------------------
# folders


def is_empty_or_missing(path: str | os.PathLike) -> bool:
    """True when nothing is at `path` or it is an empty directory (a link, even to one, is not)."""
    path = Path(path)
    if path.is_symlink():
        return False
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def writable_parent(path: str | os.PathLike, what: str) -> None:
    """UserError (one sentence) unless a new entry can be made beside `path`: its parent folder
    exists or can be made, and a folder can be created there (not /proc, not read-only)."""
    from base.errors import UserError

    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".curateevo-probe-", dir=parent))
    except OSError as exc:
        raise UserError(f"cannot write {what} {path}: {exc.strerror or exc} in {parent}; choose another place") from None
