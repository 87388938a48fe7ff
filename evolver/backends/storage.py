"""`--storage URI`: where the Ray backend's folders travel instead of Ray's object store, for
outputs too large for it or a cluster whose object store is small. Any filesystem fsspec opens:
`s3://BUCKET/DIR` (with s3fs installed on every node), `gs://` (gcsfs), `hdfs://`, ..., or a
path: a local path serves one machine, or a disk every node mounts at the same place.

A thin adapter, no storage layer: a packed folder (`ray_cluster.pack`) is one object named by the
sha256 of its bytes, written whole and checked against its name when read back.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from base.errors import UserError, printable


def _fs(ref: str):
    import fsspec

    return fsspec.core.url_to_fs(ref)


class Storage:
    def __init__(self, uri: str):
        # a relative path means the driver's: every node is given the same absolute one
        self.uri = (uri if "://" in uri else str(Path(uri).expanduser().resolve())).rstrip("/")

    def check(self) -> str:
        """A probe written and read back here (the driver); its ref, which `readable` checks on a
        node. UserError (one sentence) when the URI cannot be used."""
        try:
            return self.put(b"curateevo storage probe\n")
        except ImportError as err:   # a scheme whose fsspec package is missing (s3fs, gcsfs, ...)
            raise UserError(f"--storage {self.uri}: {printable(str(err))[:200]}; install it on the driver and "
                            "every node") from None
        except (OSError, ValueError) as err:
            raise UserError(f"--storage {self.uri} cannot be written ({printable(type(err).__name__)}: "
                            f"{printable(str(err))[:200]}); give a URI every node can read and write") from None

    def put(self, data: bytes) -> str:
        """Store `data`; the ref `get` reads it back by (the URI of the object)."""
        ref = f"{self.uri}/{hashlib.sha256(data).hexdigest()}.tar"
        fs, path = _fs(ref)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, data)   # the same name means the same bytes: a retried job overwrites alike
        return ref

    @staticmethod
    def get(ref: str) -> bytes:
        fs, path = _fs(ref)
        data = fs.cat_file(path)
        if hashlib.sha256(data).hexdigest() != Path(path).name.removesuffix(".tar"):
            raise OSError(f"{ref} does not hold the bytes it was written with (a torn or foreign write)")
        return data

    @staticmethod
    def remove(refs) -> None:
        for ref in set(refs):
            fs, path = _fs(ref)
            try:
                fs.rm_file(path)
            except FileNotFoundError:
                pass


def readable(ref: str) -> str:
    """On a node: '' when the probe `ref` reads back whole here, else why not."""
    try:
        Storage.get(ref)
        return ""
    except Exception as err:   # noqa: BLE001 — any failure is the answer, said by the driver
        return f"{type(err).__name__}: {err}"
