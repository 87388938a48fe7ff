"""The default raw corpora, built from the train split of the BFCL benchmarks only.

    curateevo corpus build bfcl|bfcl-single --setting labeled|wild --out D [--seed N] [--max-records N]

writes `D/corpus.jsonl` (canonical raw records, sorted by id), `D/build.json` (what was built
from what: benchmark, setting, seed, split, counts, the splits file's and the corpus's sha256)
and, for `wild`, `D/noise_labels.json` (the noise kind of every record; never in the records,
whose ids are opaque). The same arguments give byte-identical files. Only `tasks("train")` of
the benchmark is read: the builder never asks for a dev or test task. The builders are
corpus_multi_turn.py and corpus_single_turn.py; what their wild corpora share (seeded draws, ids,
noise fallback, duplicates, the build loop) is corpus_noise.py.

Multi-turn (`bfcl`, source `bfcl_multi_turn`): one record per train task of every variant
(`base`, `miss_func`, `miss_param`, `long_context`; `--variants` narrows it).

- labeled: the ground-truth calls executed one per assistant message on the task's own fresh
  backends (environments.bfcl.multi_turn), the real observations as tool messages, and a short
  assistant reply closing each user turn (for a turn with no gold call, a request for the missing
  detail, or a plain "cannot" when the function is missing). `tools` is every function the task
  offers at some point (for `miss_func` the revealed one too: a record has one tool list), and
  `meta.env` names the task so an environment can rebuild it. `outcome` is the official checker's
  verdict on the record (all pass).
- wild: the same tasks written with seeded, realistic noise, every call really executed:
  `wrong_call_recovery` (a wrong call - a mistyped value, a missing required argument - answered
  by its real error, then the right call), `malformed_arguments` (an unknown argument name or a
  wrong-typed value, its real error, then the right call), `redundant_read` (a read repeated),
  `off_task_chatter` (small talk in the assistant's messages), `abandoned` (stops part-way),
  `wrong_end_state` (a wrong call that goes through and is never corrected), plus `clean` ones
  and `exact_duplicate` / `near_duplicate` copies (a near duplicate re-says the closing replies).
  `outcome` is the official checker's verdict on each record as written: honest, whatever the
  noise did.

Single-turn (`bfcl-single`, source `bfcl_single_turn`): one record per train item of
`simple_python`, `multiple`, `parallel`, `parallel_multiple` and `irrelevance`.

- labeled: the user request and one assistant message with the gold calls (each parameter's first
  accepted value; nothing is executed in single-turn BFCL), or a short refusal for `irrelevance`;
  checked by the official `ast_checker`.
- wild: `wrong_type`, `wrong_value`, `missing_required`, `hallucinated_function` (a call to a
  function that is not offered), `unparseable_call`, `unwanted_call` (a call where none was
  wanted), `clean`, `exact_duplicate`, `near_duplicate`, each judged by the checker. A call the
  canonical format cannot hold as a tool call (an unknown function, text that is not a call)
  stays in the assistant's content, as a model's unparsed output would.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Mapping, Sequence

from base.registry import get_benchmark
from environments.bfcl.corpus_multi_turn import MultiTurnBuilder
from environments.bfcl.corpus_noise import SPLIT, build_records
from environments.bfcl.corpus_single_turn import SingleTurnBuilder
from environments.bfcl.corpus_size import keep_tasks, sized_tasks
from environments.bfcl.splits import SPLITS_PATH, bfcl_eval_version
from base.errors import UserError
from base.files import atomic_write, sha256_file
from corpora import write_corpus
from base.schemas import canonical_json

SETTINGS = ("labeled", "wild")
BENCHMARKS = ("bfcl", "bfcl-single")
CORPUS_FILE, LABELS_FILE, BUILD_FILE = "corpus.jsonl", "noise_labels.json", "build.json"


def build(benchmark: str, setting: str, seed: int = 0, *, variants: Sequence[str] | None = None,
          limit: int | None = None, progress: Callable[[str], None] | None = None,
          splits_path: str | None = None, max_records: int | None = None) -> tuple[list[dict], dict, dict]:
    """(records sorted by id, noise labels by id ({} for labeled), build info). `max_records`:
    only the train tasks whose wild records fill at most that many (corpus_size.py; both settings
    take the same tasks)."""
    if setting not in SETTINGS:
        raise UserError(f"unknown setting {setting!r} (one of {', '.join(SETTINGS)})")
    if benchmark not in BENCHMARKS:
        raise UserError(f"unknown corpus benchmark {benchmark!r} (one of {', '.join(BENCHMARKS)})")
    bench = get_benchmark(benchmark, splits_path=splits_path)
    maker = MultiTurnBuilder(bench, seed) if benchmark == "bfcl" else SingleTurnBuilder(bench, seed)
    records, labels = build_records(maker, setting, variants, limit, progress)
    full = len(records)
    if max_records is not None:
        wild = records if setting == "wild" else build_records(
            MultiTurnBuilder(bench, seed) if benchmark == "bfcl" else SingleTurnBuilder(bench, seed),
            "wild", variants, limit, None)[0]
        records, labels = keep_tasks(records, labels, sized_tasks(wild, max_records, seed))
    info = {
        "benchmark": benchmark, "setting": setting, "seed": seed, "split": SPLIT,
        "variants": list(variants) if variants else None, "limit": limit,
        "records": len(records),
        **({"max_records": max_records, "records_unsized": full} if max_records is not None else {}),
        "tasks": len({r["meta"]["env"]["task_id"] for r in records}),
        "success": sum(1 for r in records if r["outcome"]["success"]),
        "by_variant": dict(sorted(Counter(r["meta"]["env"]["variant"] for r in records).items())),
        "splits_sha256": sha256_file(Path(splits_path) if splits_path else SPLITS_PATH),
        "bfcl_eval": bfcl_eval_version(),
    }
    if labels:
        info["noise"] = dict(sorted(Counter(v["noise"] for v in labels.values()).items()))
    skipped = getattr(maker, "skipped", None)
    if skipped:
        info["skipped_unaccepted_gold"] = skipped
    return records, labels, info


def write(out: Path, benchmark: str, setting: str, seed: int = 0, **options) -> dict:
    """Build and write the corpus into directory `out`; returns the build info (plus wall time
    and bytes, which are not written)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    records, labels, info = build(benchmark, setting, seed, **options)
    corpus = out / CORPUS_FILE
    write_corpus(records, corpus)
    info["corpus_sha256"] = sha256_file(corpus)
    if setting == "wild":
        atomic_write(out / LABELS_FILE, json.dumps({"benchmark": benchmark, "seed": seed, "counts": info["noise"],
                                                    "labels": labels}, sort_keys=True, ensure_ascii=False, indent=1) + "\n")
    else:
        (out / LABELS_FILE).unlink(missing_ok=True)
    atomic_write(out / BUILD_FILE, json.dumps(info, sort_keys=True, ensure_ascii=False, indent=1) + "\n")
    return {**info, "seconds": round(time.perf_counter() - started, 2), "bytes": corpus.stat().st_size}


def render(records: Sequence[Mapping]) -> bytes:
    return b"".join(canonical_json(r).encode("utf-8") + b"\n" for r in records)


def cached(root: Path, benchmark: str, setting: str, seed: int = 0, max_records: int | None = None) -> Path:
    """The folder of a default corpus under `root` (runs/corpora), built on first use: the train
    split of `benchmark`, sized to `max_records` records when given (a profile's training budget)."""
    folder = Path(root) / (f"{benchmark}-{setting}-seed{seed}" + (f"-max{max_records}" if max_records else ""))
    if not (folder / CORPUS_FILE).is_file():
        write(folder, benchmark, setting, seed, max_records=max_records)
    return folder
