import hashlib
import inspect
import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CORPUS = ROOT / "environments" / "data" / "sample_corpus.jsonl"
SEED_STRATEGY = ROOT / "curation_strategies" / "seed"


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): one worker per core this process may use, and one more, at most 4.

    Much of the suite waits on subprocesses, Docker and sockets: two workers on the 2-core machine
    kept only about 1.2 cores busy, and a third took the suite from 20 min 18 s to 16 min 22 s
    (quiet readings, bench/results/suite-2026-12-07-4bcef89.json and -2fd964a-n3.json); past 4, the
    trainings and sandboxes the tests start only contend. `-n 0` runs in one process."""
    return max(1, min(4, len(os.sched_getaffinity(0)) + 1))


def write_strategy(folder: Path, code: str, **inputs) -> Path:
    """A strategy directory with `strategy.py` (dedented `code`) and optional inputs/*.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "strategy.py").write_text(textwrap.dedent(code))
    if inputs:
        (folder / "inputs").mkdir(exist_ok=True)
        for name, value in inputs.items():
            (folder / "inputs" / f"{name}.json").write_text(json.dumps(value))
    return folder


# The first trajectory turned into one SFT record, in pure Python: what the hostile strategies
# below emit besides their mischief, so their numbers can be compared with an honest one.
HONEST = """
def sft_of(r):
    return {"id": r["id"], "messages": r["messages"], "tools": r.get("tools", []),
            "meta": {"origin": [r["id"]]}}

def honest(raw):
    return {"sft": [sft_of(r) for r in raw if any(m["role"] == "assistant" for m in r["messages"])],
            "rl": [], "memory": []}
"""


@pytest.fixture
def strategy(tmp_path):
    """Factory: strategy(code, **inputs) → a strategy directory whose code can use honest(raw)."""
    count = iter(range(1000))

    def make(code: str, **inputs) -> Path:
        return write_strategy(tmp_path / f"strategy{next(count)}", HONEST + textwrap.dedent(code), **inputs)

    return make


@pytest.fixture(autouse=True)
def own_temporary_directory(tmp_path_factory, monkeypatch):
    """Each test's temporary directory (TMPDIR, and `tempfile`'s in this process) is its own.

    What a curateevo process a test kills on purpose leaves there (a job folder, a corpus's record
    folder) is reaped by the next command in that test, not announced by some other test's command
    on the other xdist worker ("removed 1 job folder(s) … left by a curateevo process that was
    killed" before an error whose whole text a test compares: CI at 9067ac6)."""
    import tempfile

    own = tmp_path_factory.mktemp("tmp")
    monkeypatch.setenv("TMPDIR", str(own))
    monkeypatch.setattr(tempfile, "tempdir", str(own))
    yield own


TINY_MAX_NEW_TOKENS = 16
TINY_RUN_ARGS = ("--max-new-tokens", str(TINY_MAX_NEW_TOKENS))
"""What an evaluation of the tiny random model decodes in tests unless the test asks for a number: it
never emits an end token, so the product's 128 would be decoded in full on every step (most of the
suite's evaluation time) while no test reads past the first tokens of its gibberish."""


@pytest.fixture(autouse=True, scope="session")
def tiny_model_generation_cap():
    """Every policy the product builds in this process (`environments.evaluate.build_policy`: the run's
    evaluate stage, `bench quality`'s cells, `eval`) on the tiny random model decodes at most
    TINY_MAX_NEW_TOKENS new tokens unless the test asks for another number than the product's
    default. Runs started as child processes get it as `--max-new-tokens` (TINY_RUN_ARGS)."""
    from environments import evaluate
    from environments.policies.limits import DEFAULT_MAX_NEW_TOKENS

    real = evaluate.build_policy

    def build_policy(**options):
        if options.get("base") == "tiny-random" and not options.get("endpoint") and \
                options.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS) == DEFAULT_MAX_NEW_TOKENS:
            options["max_new_tokens"] = TINY_MAX_NEW_TOKENS
        return real(**options)

    patch = pytest.MonkeyPatch()
    patch.setattr(evaluate, "build_policy", build_policy)
    yield
    patch.undo()


def _sha256(path) -> str | None:
    return None if path is None else hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def _trainings_pool(tmp_path_factory) -> Path:
    """One pool for the whole session: under pytest-xdist the workers' base folders share a parent
    (pytest-N/popen-gwK), so a training one worker did is copied by the others (a finished training
    lands whole, by rename)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pool = tmp_path_factory.getbasetemp().parent / "trained-once"
        pool.mkdir(exist_ok=True)
        return pool
    return tmp_path_factory.mktemp("trained-once")


def _normal(value):
    """An option's value as train() reads it (report_to: a name or a list of names)."""
    return [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else value


@pytest.fixture(scope="module")
def trained_once(_trainings_pool):
    """For a module that runs many tiny trainings of the same data (the `test` profile on the same
    curated files): `trainer.train.train` trains each distinct training (the SFT and RL files' bytes,
    base, profile, seed and budgets) once per session, for real, in its child process; a training
    asked for again gets a copy of that output folder (request.json naming its own files, its
    train.log echoed) instead of a second identical child. What is compared across runs (decisions,
    artifacts, adapters) is then bytes a real training wrote; whether two trainings of the same data
    write the same bytes is asserted where no copy is made (test_resume's killed run and the Ray
    runs train in child processes, test_trainer_e2e trains directly)."""
    import trainer.train as train_module

    real = train_module.train
    defaults = {name: p.default for name, p in inspect.signature(real).parameters.items()
                if p.default is not inspect.Parameter.empty}

    def train(sft, rl, out, *, echo=None, timeout=None, **options):
        from base.files import is_empty_or_missing

        # the same training however it was asked for: how progress is shown and an SFT stage reused
        # (trainer.sft_reuse: the same bytes, tests/test_sft_reuse.py) change no byte, and an
        # option given at its default value (a run passes them all, `bench quality` none) is no option
        shown = {k: v for k, v in options.items()
                 if k not in ("progress", "reuse_sft") and not (k in defaults and _normal(v) == _normal(defaults[k]))}
        key = hashlib.sha256(json.dumps({"sft": _sha256(sft), "rl": _sha256(rl), **shown}, sort_keys=True,
                                        default=str).encode()).hexdigest()[:32]
        done = _trainings_pool / key
        if not done.is_dir() or not is_empty_or_missing(out):
            summary = real(sft, rl, out, echo=echo, timeout=timeout, **options)
            if not done.is_dir():
                partial = done.with_name(f"{key}.partial-{os.getpid()}")
                shutil.copytree(out, partial, dirs_exist_ok=True)
                try:
                    os.replace(partial, done)
                except OSError:   # another worker landed the same training first: theirs is kept
                    shutil.rmtree(partial, ignore_errors=True)
            return summary
        shutil.copytree(done, out, dirs_exist_ok=True)
        request = json.loads((done / "request.json").read_text())
        request.update({"sft": None if sft is None else str(Path(sft).resolve()),
                        "rl": None if rl is None else str(Path(rl).resolve()), "out": str(Path(out).resolve())})
        (Path(out) / "request.json").write_text(json.dumps(request, indent=2, sort_keys=True) + "\n")
        if echo is not None:
            echo.write((done / "train.log").read_text(encoding="utf-8", errors="replace"))
            echo.flush()
        return json.loads((done / "summary.json").read_text())

    patch = pytest.MonkeyPatch()
    patch.setattr(train_module, "train", train)
    yield
    patch.undo()


@pytest.fixture(scope="session")
def sample_corpus() -> Path:
    assert SAMPLE_CORPUS.is_file(), "the bundled sample corpus is part of the package"
    return SAMPLE_CORPUS


def read_artifact(path: Path) -> list[dict]:
    """The records of a curated artifact file (its file form decoded: sandbox.exchange)."""
    import json

    from sandbox.exchange import from_file

    kind = Path(path).name.split(".")[0]
    return [from_file(kind, json.loads(line)) for line in Path(path).read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="session")
def quality_corpora(tmp_path_factory) -> tuple[Path, Path]:
    """Tiny real corpora for the quality benchmark: the wild and labeled corpora of the first 40
    bfcl-single train tasks."""
    from environments.bfcl import corpus_builder

    root = tmp_path_factory.mktemp("corpora")
    corpus_builder.write(root / "wild", "bfcl-single", "wild", 0, limit=40)
    corpus_builder.write(root / "labeled", "bfcl-single", "labeled", 0, limit=40)
    return root / "wild", root / "labeled"


def bench_quality(corpora: tuple[Path, Path], cache: Path, *extra: str) -> int:
    """`curateevo bench quality` on `quality_corpora` with the `test` profile, five tasks and the process executor."""
    from evolver.cli import main

    wild, labeled = corpora
    return main(["bench", "quality", "--wild", str(wild), "--labeled", str(labeled), "--tasks", "5",
                 "--profile", "test", "--sandbox", "process", "--cache", str(cache), "--quiet", *extra])


def curate_files(strategy, corpus_paths, out_dir, *, corpus_format: str = "auto", on_error: str = "abort", **kwargs):
    """A strategy directory executed once on corpus files (the tests' shorthand for what
    `curateevo curate` does: load and check the corpus, then `sandbox.curate.execute`)."""
    from corpora import load_corpus
    from sandbox.curate import execute
    from sandbox.strategy_files import strategy_files

    corpus = load_corpus([str(p) for p in corpus_paths], fmt=corpus_format, on_error=on_error)
    return execute(strategy_files(Path(strategy)), corpus, Path(out_dir), **kwargs)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def model_server():
    """A real OpenAI-compatible server on this machine (`curateevo serve`'s `transformers serve` over the
    embedded SmolLM2-135M, one CPU thread): (base URL, the model name it serves). Started once per worker."""
    from trainer import serve

    proc, url, model = serve.start(port=free_port(), threads=1)
    yield url, model
    serve.stop(proc)
