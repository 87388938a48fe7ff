"""The in-sandbox runtime: load `strategy.py`, build the context, call `curate`, stream records.

This is the only project code that runs beside candidate code, inside the executor. It judges
nothing: the host validates, re-serialises, hashes and profiles what it writes. It writes exactly
`sft.jsonl`, `rl.jsonl` and `memory.jsonl` into the output directory (and `dropped.jsonl` when a
toolkit operator noted what it dropped) and exits 0, or prints the strategy's traceback to stderr
and exits with STRATEGY_FAILED. While it runs, a curation longer than `progress.INTERVAL_S` says
on stderr how far it is (sandbox.progress: records read, then written), a line every few seconds.

    python -m sandbox.runtime --strategy DIR --corpus FILE --out DIR --seed N
"""
from __future__ import annotations

import argparse
import errno
import importlib.util
import json
import random
import sys
import time
import traceback
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from base.provenance import DROPPED
from sandbox import progress
from sandbox.lazy_corpus import LazyCorpus
from sandbox.text import printable

STRATEGY_FAILED = 3
PEAK_LINE = "[curateevo runtime] peak resident memory: "   # + bytes: the last line on stderr of a finished curation
ARTIFACTS = ("sft", "rl", "memory")


def _inputs(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    both = dict(inputs)
    both.update({f"{k}.json": v for k, v in inputs.items()})
    return MappingProxyType(both)


class Context:
    """What a strategy gets besides the raw corpus (DESIGN: the strategy module contract)."""

    def __init__(self, inputs: Mapping[str, Any], seed: int, toolkit: Any, env: Any = None, llm: Any = None,
                 budget: Mapping[str, Any] | None = None):
        self.inputs = _inputs(inputs)   # by stem or by file name
        self.seed = seed
        self.toolkit = toolkit
        self.env = env   # sandbox.simenv.environment.Environment over the train-split scenarios, or None
        self.llm = llm   # sandbox.llm_client.LLMClient to the host's LLM, or None when the run has none
        # what the recipe will train on (trainer.recipe.curation_budget: sft_examples, max_length, …),
        # or None when the curation is not for a training (plain `curate` without --profile)
        self.budget = MappingProxyType(dict(budget)) if budget is not None else None

    def rng(self, name: str) -> random.Random:
        """An independent generator per name: a new draw under one name never shifts another."""
        return random.Random(f"curateevo:{self.seed}:{name}")


def read_inputs(strategy_dir: Path) -> dict[str, Any]:
    """`inputs/<name>.json` → {name: parsed JSON}, in sorted order."""
    folder = strategy_dir / "inputs"
    if not folder.is_dir():
        return {}
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))}


def load_strategy(strategy_dir: Path):
    sys.path.insert(0, str(strategy_dir))  # helper modules beside strategy.py
    spec = importlib.util.spec_from_file_location("strategy", strategy_dir / "strategy.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["strategy"] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "curate", None)):
        raise TypeError("strategy.py defines no function curate(raw, ctx)")
    return module


def _parts(curated: Any) -> dict[str, Iterable]:
    """The record lists of what `curate` returned: a toolkit.Curated (or a dict of its three
    lists); anything else is the strategy's TypeError, never an empty output."""
    if isinstance(curated, Mapping):
        extra = sorted(str(k) for k in curated if k not in ARTIFACTS)
        if extra:
            raise TypeError(f"curate returned a dict with key {extra[0][:80]!r}; return a toolkit.Curated")
        parts = {kind: curated.get(kind) for kind in ARTIFACTS}
    elif all(hasattr(curated, kind) for kind in ARTIFACTS):
        parts = {kind: getattr(curated, kind) for kind in ARTIFACTS}
    else:
        raise TypeError(f"curate returned {type(curated).__name__}, not a toolkit.Curated (lists sft, rl, memory)")
    from curation_strategies.toolkit.spill import RecordList
    for kind, value in parts.items():
        if not isinstance(value, (list, tuple, RecordList, type(None))):
            raise TypeError(f"curate returned a Curated whose {kind} is {type(value).__name__}, not a list")
    return {kind: value or () for kind, value in parts.items()}


def write_records(out_dir: Path, curated: Any) -> None:
    """`<kind>.jsonl` of each part, a record a line (a RecordList's spilled lines copied as they are,
    their disk given back as they go when no other part is the same list: a copy, not a second one)."""
    from base.files import free_blocks
    from curation_strategies.toolkit.spill import RecordList, encode_record
    parts = _parts(curated)
    for kind, records in parts.items():
        alone = sum(other is records for other in parts.values()) == 1
        lines = records.encoded_lines(free_blocks if alone else None) if isinstance(records, RecordList) \
            else map(encode_record, records)
        with open(out_dir / f"{kind}.jsonl", "wb") as out:
            for line in lines:
                out.write(line)
                progress.WRITTEN.add()


def write_drops(out_dir: Path, rows: list[dict]) -> None:
    """`dropped.jsonl`: what toolkit operators noted they dropped (toolkit.provenance.dropped), when anything."""
    if rows:
        with open(out_dir / DROPPED, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def read_corpus(path: Path) -> LazyCorpus:
    """The raw corpus as a sequence decoded on access: the runtime never holds it whole."""
    return LazyCorpus(path)


def peak_bytes() -> int:
    """The largest resident memory of this process or any child it waited for, in bytes. Its own is the
    high-water mark of its own memory (Linux's VmHWM), not ru_maxrss, which carries over an exec what
    the process that started it held (a vfork from a large host would be counted as the runtime's)."""
    import resource
    own = None
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            own = next((1024 * int(line.split()[1]) for line in status if line.startswith("VmHWM:")), None)
    except OSError:
        pass
    if own is None:
        own = 1024 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max(own, 1024 * resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def out_of_memory() -> MemoryError:
    """A strategy's MemoryError as one sentence naming the sandbox's cap and the runtime's peak."""
    import resource
    peak = peak_bytes()
    cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    capped = f"{cap / 2**30:.2f} GiB of address space" if cap != resource.RLIM_INFINITY else "the container's memory"
    return MemoryError(f"out of memory: the sandbox's cap is {capped} and the strategy's peak resident memory "
                       f"was {peak / 2**30:.2f} GiB; keep fewer records in memory at once (the corpus is read on "
                       "access), or give the sandbox more memory")


def file_too_large() -> OSError:
    """A write refused at the sandbox's cap on one file's size (the kernel's EFBIG: Python ignores
    SIGXFSZ) as one sentence naming the cap and the runtime's peak."""
    import resource
    cap = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    capped = ("the file system's largest file" if cap == resource.RLIM_INFINITY else
              f"{cap / 2**30:.2f} GiB" if cap >= 2**30 else f"{cap / 2**20:.0f} MiB")
    return OSError(f"file too large: the sandbox's cap on one file is {capped}, and a file of this curation (an "
                   f"artifact, or the records a toolkit list keeps on disk) reached it; the strategy's peak resident "
                   f"memory was {peak_bytes() / 2**30:.2f} GiB; curate fewer or shorter records")


def report_failure(exc: BaseException) -> None:
    """The traceback on stderr; its last line (which the host quotes) one line of bounded length
    even when the message is long or holds newlines or escape sequences."""
    text = str(exc)
    safe = printable(text, 2000, one_line=True)
    try:
        lines = traceback.format_exception(exc)
        if safe != text:
            lines = lines[:len(lines) - len(traceback.format_exception_only(exc))] + [f"{type(exc).__name__}: {safe}\n"]
    except (MemoryError, OSError):   # no memory left to read the source lines: the line the host quotes alone
        lines = [f"{type(exc).__name__}: {safe}\n"]
    sys.stderr.write("".join(lines))
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbox.runtime")
    parser.add_argument("--strategy", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--env", type=Path, help="ctx.env: the scenario folder the host mounted")
    parser.add_argument("--env-calls", type=int, default=200_000, help="ctx.env's call budget")
    parser.add_argument("--llm", type=Path, help="ctx.llm: the host's LLM channel (a unix socket)")
    parser.add_argument("--budget", help="ctx.budget: what the recipe will train on, as JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        from curation_strategies import toolkit
        from curation_strategies.toolkit import spill
        from curation_strategies.toolkit.provenance import drops
        from sandbox.llm_client import LLMClient
        from sandbox.simenv.environment import Environment

        raw = read_corpus(args.corpus)
        report = progress.Reporter(len(raw), started=started)
        env = Environment(args.env, args.env_calls) if args.env else None
        llm = LLMClient(args.llm) if args.llm else None
        budget = json.loads(args.budget) if args.budget else None
        ctx = Context(read_inputs(args.strategy), args.seed, toolkit, env, llm, budget)
        drops(clear=True)   # this curation's notes only, should a process run more than one
        spill.SPILL_DIR = str(args.out)   # the sandbox's /tmp is a small tmpfs; the output folder is on disk
        curated = load_strategy(args.strategy).curate(raw, ctx)
        report.writing()
        write_records(args.out, curated)
        write_drops(args.out, drops())
    except BaseException as exc:  # the strategy's failure, whatever it is, is reported, not raised
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            exc = RuntimeError("strategy called sys.exit before returning its records")
        elif isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
            # at the address-space cap the kernel refuses the next allocation: an import's directory
            # scan says ENOMEM as an OSError where Python's own allocator would raise MemoryError
            traceback.clear_frames(exc.__traceback__)   # the strategy's objects go first: the report needs memory
            exc = out_of_memory().with_traceback(exc.__traceback__)   # the peak is the high-water mark, kept
        elif isinstance(exc, OSError) and exc.errno == errno.EFBIG:
            exc = file_too_large().with_traceback(exc.__traceback__)
        report_failure(exc)
        return STRATEGY_FAILED
    sys.stderr.write(f"{PEAK_LINE}{peak_bytes()}\n")   # the host records it (sandbox.executor.Execution)
    return 0


if __name__ == "__main__":
    sys.exit(main())
