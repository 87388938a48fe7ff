"""The Ray backend: every job of a batch is a Ray task submitted at once with its resource needs
(CPUs, GPUs per training from the profile); Ray places them on the cluster's nodes and retries
one whose worker or node died.

Nothing assumes a shared disk: the inputs a job reads (an epoch's artifacts, an adapter) are
packed once into Ray's object store (or, with `--storage URI`, written there: storage.py), the
task unpacks them into a private temporary folder on its node, runs the stage function there,
and returns its output folder packed (or its ref in the storage); the driver unpacks it into the
job's `out` (beside it, then renamed). An evaluation that needs its
training's adapter takes that training's object directly, so it can start on any node as soon
as the training ends. The project (same lock) is installed on every node.
"""
from __future__ import annotations

import io
import os
import shutil
import socket
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from base.lifetime import owned_temporary_directory
from evolver.backends.jobs import InFlight, Needs, StageJob, needs_of
from evolver.backends.storage import Storage, readable
from base.errors import RunFailed, UserError, printable

MAX_RETRIES = 3        # a task whose worker process or node dies is run again, up to this many times
POLL_S = 5.0           # how often the console and RUN/stages.json are refreshed while jobs run


def _ray():
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray needs Ray on this machine and on every node: "
                        "pip install 'curateevo[ray]' (or bash scripts/setup.sh, which installs the lock)") from None
    return ray


# ---------------------------------------------------------------------------- moving folders


def pack(path: Path) -> bytes:
    """A file or folder as an uncompressed tar (member `x`)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(path, arcname="x")
    return buffer.getvalue()


def unpack(data: bytes, dest: Path) -> Path:
    """`pack`'s bytes at `dest` (replacing what was there), whole or not at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.landing-", dir=dest.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(staging, filter="data")
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(staging / "x", dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def bytes_of(data: bytes | str) -> bytes:
    """A packed folder, from the object store (bytes) or the storage (its ref)."""
    return Storage.get(data) if isinstance(data, str) else data


def relocate(value: Any, old: str, new: str) -> Any:
    """`value` with every path string under `old` moved under `new` (a result names its outputs)."""
    if isinstance(value, str) and (value == old or value.startswith(old + os.sep)):
        return new + value[len(old):]
    if isinstance(value, dict):
        return {k: relocate(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [relocate(v, old, new) for v in value]
    return value


# ---------------------------------------------------------------------------- on a worker


class Board:
    """A small actor on the driver's node: which node each task started on, and when."""

    def __init__(self):
        self.started: dict[str, tuple[str, float]] = {}

    def start(self, key: str, node: str) -> None:
        self.started[key] = (node, time.time())

    def snapshot(self) -> dict[str, tuple[str, float]]:
        return dict(self.started)


def run_task(spec: dict, board, *objects) -> tuple[Any, str, bytes | str | None, str]:
    """One job on whatever node Ray chose: (its result, its output path here, the output packed
    or its storage ref, the node)."""
    import ray

    node = f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:8]}"
    board.start.remote(spec["job"].key, node)
    return run_job(spec, objects) + (node,)


def run_job(spec: dict, objects) -> tuple[Any, str, bytes | str | None]:
    """`spec`'s job in a private temporary folder: its shipped inputs (then its dependencies'
    outputs, `objects` in that order) unpacked there, its output packed into the result (or put
    in `spec["storage"]`)."""
    job, ship, after = spec["job"], spec["ship"], spec["after"]
    with owned_temporary_directory("stage") as tmp:
        tmp, given = Path(tmp), {}
        for name, data in zip(ship, objects):
            place = unpack(bytes_of(data), tmp / "in" / name)
            given[name] = str(place) if isinstance(job.kwargs[name], str) else place
        for (name, field_), (result, out, data, *_) in zip(after, objects[len(ship):]):
            value = result.get(field_)
            given[name] = None if value is None else relocate(value, out, str(unpack(bytes_of(data), tmp / "after" / name)))
        out = tmp / "out"
        result = job.run_here(out, **given)
        data = pack(out) if out.exists() else None
        if data is not None and spec.get("storage"):
            data = Storage(spec["storage"]).put(data)
        return result, str(out), data


def inputs_digest(corpus: list[str], tools: str | None) -> str:
    """The sha256 of a corpus (and its --tools file) as read on this node, or why it cannot be read."""
    from base.files import sha256_path
    from corpora import corpus_sha256

    try:
        return corpus_sha256(corpus) + (":" + sha256_path(Path(tools)) if tools else "")
    except (OSError, ValueError, UserError) as err:
        return f"unreadable ({type(err).__name__}: {err})"


# ---------------------------------------------------------------------------- on the driver


class RayBatch:
    def __init__(self, ray, jobs: list[StageJob], landed, progress: InFlight | None, storage: Storage | None = None):
        self.ray, self.landed, self.progress, self.storage, self.stored = ray, landed, progress, storage, []
        self.jobs, self.refs, self.results, self.errors = {j.key: j for j in jobs}, {}, {}, {}
        self.order = [j.key for j in jobs]
        self.board = ray.remote(Board).options(num_cpus=0, scheduling_strategy=_here(ray)).remote()
        task = ray.remote(run_task)
        shipped: dict[str, Any] = {}   # one object per distinct input path, shared by every job reading it
        for job in jobs:
            ship = [n for n in job.ship if job.kwargs.get(n) is not None]
            for name in ship:
                path = str(job.kwargs[name])
                if path not in shipped:
                    data = pack(Path(path))
                    shipped[path] = ray.put(data) if storage is None else storage.put(data)
                    self.stored += [shipped[path]] if storage is not None else []
            spec = {"job": job, "ship": ship, "after": [(name, f) for name, (_, f) in job.after.items()],
                    "storage": storage.uri if storage is not None else None}
            self.refs[job.key] = task.options(num_cpus=job.cpus, num_gpus=job.gpus, max_retries=MAX_RETRIES,
                                              retry_exceptions=False, name=job.label or job.key).remote(
                spec, self.board, *[shipped[str(job.kwargs[n])] for n in ship],
                *[self.refs[dep] for dep, _ in job.after.values()])
        self.waiting = dict(self.refs)

    def result(self, key: str) -> Any:
        while key not in self.results and key not in self.errors:
            self._land_some()
        if key in self.errors:
            raise self.errors[key]
        return self.results[key]

    def _land_some(self) -> None:
        ready, _ = self.ray.wait(list(self.waiting.values()), num_returns=len(self.waiting), timeout=POLL_S,
                                 fetch_local=False)
        ready = set(ready)
        for key in [k for k in self.order if k in self.waiting and self.waiting[k] in ready]:   # job order: a
            del self.waiting[key]                                # training lands before its evaluation
            self._land(self.jobs[key])
        if not self.waiting and self.storage is not None:   # every job read what it needed: the objects go
            Storage.remove(self.stored)
        self._show()

    def _land(self, job: StageJob) -> None:
        ray = self.ray
        try:
            result, out, data, node = ray.get(self.refs[job.key])
        except ray.exceptions.RayTaskError as err:   # the stage raised: the same error as on the local backend
            self.errors[job.key] = err.cause if isinstance(err.cause, BaseException) else RunFailed(str(err))
            return
        except ray.exceptions.RayError as err:       # its node lost past MAX_RETRIES, or the driver's own node
            why = "the Ray node this driver is attached to died" if "LocalRaylet" in type(err).__name__ else \
                f"its worker or node died more than {MAX_RETRIES} retries allow"
            self.errors[job.key] = RunFailed(f"{job.label or job.key} was lost on the Ray cluster: {why} "
                                             f"({printable(type(err).__name__)}); `curateevo resume RUN` submits it again")
            return
        result = relocate(result, out, str(job.out))
        if data is None:
            shutil.rmtree(job.out, ignore_errors=True)
        else:
            self.stored += [data] if isinstance(data, str) else []
            unpack(bytes_of(data), job.out)
        self.results[job.key] = result
        if self.progress is not None:
            started = self.started().get(job.key)
            if started:
                self.progress.finished(kind(job.key), time.time() - started[1])
        if self.landed is not None:
            self.landed(job, result)

    def started(self) -> dict:
        try:
            return self.ray.get(self.board.snapshot.remote(), timeout=POLL_S)
        except self.ray.exceptions.RayError:
            return {}

    def _show(self) -> None:
        if self.progress is None:
            return
        if not self.waiting:
            self.progress.clear()
            return
        started, now, rows = self.started(), time.time(), []
        for key in [k for k in self.order if k in self.waiting]:
            job = self.jobs[key]
            row = {"stage": key, "label": job.label or key, "state": "queued"}
            if key in started:
                node, since = started[key]
                row.update(state="running", node=node, elapsed_s=round(now - since, 1),
                           eta_s=self.progress.eta(kind(key), now - since))
            rows.append(row)
        self.progress.update(rows)


def kind(key: str) -> str:
    """`train-s0` → `train`, `proxy-evaluate-c1` → `proxy-evaluate`: jobs whose durations are alike."""
    return key.rsplit("-", 1)[0]


def _refused(address: str | None, timeout_s: float = 10.0) -> str:
    """Why nothing listens at a `HOST:PORT` head address ('' when something does, or for another
    form of address, which Ray judges)."""
    host, _, port = (address or "").rpartition(":")
    if not host or not port.isdigit() or "://" in host:
        return ""
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        return ""
    except OSError as err:
        return f"{type(err).__name__}: {err.strerror or err}"


def _here(ray):
    return _on(ray, ray.get_runtime_context().get_node_id())


def _on(ray, node_id: str):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


class RayBackend:
    name = "ray"

    def __init__(self, address: str | None, progress: InFlight | None = None, storage: str = ""):
        self.address, self.progress, self.ray = address, progress, None
        self.storage = Storage(storage) if storage else None
        self.prepared: tuple | None = None   # (what prepare read of the config, its Needs): run and resume both ask

    def connect(self):
        if self.ray is None:
            ray = _ray()
            try:
                refused = _refused(self.address)   # Ray itself retries a dead address for minutes
                if refused:
                    raise ConnectionError(refused)
                ray.init(address=self.address or "auto", log_to_driver=False, logging_level="ERROR",
                         configure_logging=True)
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = self.address or "this machine (RAY_ADDRESS, or the cluster `ray start --head` made here)"
                raise UserError(f"no Ray cluster answers at {where} ({' '.join(str(err).split())[:160]}); start one "
                                f"with `ray start --head` and give its address with --ray-address") from None
            self.ray = ray
        return self.ray

    def prepare(self, cfg) -> Needs:
        key = (cfg.train.profile, cfg.train.launcher, cfg.benchmark, tuple(cfg.corpus), cfg.tools)
        if self.prepared is not None and self.prepared[0] == key:   # every check below was made for these
            return self.prepared[1]
        ray = self.connect()
        nodes = [(n["Resources"].get("CPU", 0), n["Resources"].get("GPU", 0)) for n in ray.nodes() if n["Alive"]]
        cpus, gpus = max(c for c, _ in nodes), max(g for _, g in nodes)
        needs = needs_of(cfg, gpus_available=gpus > 0)
        where = f"the Ray cluster at {self.address or 'auto'}"
        if max(needs.train_gpus, needs.eval_gpus) > gpus:
            raise UserError(f"{where} has {gpus:g} GPU(s) on its largest node, and profile {needs.profile} needs "
                            f"{needs.train_gpus:g} per training: add GPU workers (`ray start --address ADDR "
                            f"--num-gpus N`) or choose a CPU profile")
        if max(needs.train_cpus, needs.eval_cpus) > cpus:
            raise UserError(f"{where} has {cpus:g} CPU(s) on its largest node, and profile {needs.profile} needs "
                            f"{max(needs.train_cpus, needs.eval_cpus)} per stage: add a larger worker "
                            f"(`ray start --address ADDR --num-cpus N`)")
        if self.storage is not None:
            self.check_storage(ray)
        self.check_corpus(ray, cfg)
        self.prepared = (key, needs)
        return needs

    def check_corpus(self, ray, cfg) -> None:
        """A run without an environment evaluates on its corpus's held-out tenth, which every node
        reads at the driver's paths (with the --tools file): each live node must read the same bytes,
        checked here before any work."""
        from base import registry

        if not registry.get(cfg.benchmark).dev_corpus(cfg.corpus):   # its own dev tasks, or no corpus
            return
        expected = inputs_digest(list(cfg.corpus), cfg.tools or None)
        nodes = [n for n in ray.nodes() if n["Alive"]]
        try:
            check = ray.remote(inputs_digest)
            answers = ray.get([check.options(num_cpus=0, scheduling_strategy=_on(ray, n["NodeID"]))
                               .remote(list(cfg.corpus), cfg.tools or None) for n in nodes], timeout=600)
        except ray.exceptions.RayError as err:
            raise UserError(f"the Ray cluster could not check the corpus on every node "
                            f"({printable(type(err).__name__)}); try again when its nodes are up") from None
        for node, answer in zip(nodes, answers):
            if answer != expected:
                why = answer if answer.startswith("unreadable") else "other bytes than the driver's"
                raise UserError(f"the Ray node {node['NodeManagerAddress']} reads the corpus "
                                f"{printable(', '.join(cfg.corpus))[:200]}{' and --tools' if cfg.tools else ''} "
                                f"as {printable(why)[:200]}: a run without an environment evaluates on its corpus "
                                f"on every node, so put the files at the same path on each (or on a disk all mount)")

    def check_storage(self, ray) -> None:
        """Every live node reads a probe the driver wrote to the storage (a local path read on
        another machine is refused here, before any work)."""
        probe = self.storage.check()
        try:
            check = ray.remote(readable)
            nodes = [n for n in ray.nodes() if n["Alive"]]
            answers = ray.get([check.options(num_cpus=0, scheduling_strategy=_on(ray, n["NodeID"])).remote(probe)
                               for n in nodes], timeout=600)
        except ray.exceptions.RayError as err:   # a node died or never ran the check
            raise UserError(f"the Ray cluster could not check --storage {self.storage.uri} on every node "
                            f"({printable(type(err).__name__)}); try again when its nodes are up") from None
        finally:
            Storage.remove([probe])
        for node, why in zip(nodes, answers):
            if why:
                raise UserError(f"the Ray node {node['NodeManagerAddress']} cannot read --storage {self.storage.uri} "
                                f"({printable(why)[:200]}); give a URI every node reaches (a shared disk, s3://...)")

    def submit(self, jobs: list[StageJob], landed: Callable | None = None) -> RayBatch:
        return RayBatch(self.connect(), jobs, landed, self.progress, self.storage)

    def close(self) -> None:
        if self.ray is not None:
            self.ray.shutdown()
            self.ray = None

