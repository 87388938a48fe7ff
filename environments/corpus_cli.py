"""`curateevo corpus build NAME --setting labeled|wild --out D [--seed N] [--max-records N]`: the default
raw corpora, from an environment's train split only (`base.environment`: build_corpus; every
registered environment with `corpus_settings`, BFCL's in environments/bfcl/corpus_builder.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from base.errors import UserError, positive_int
from base import registry


def _builders() -> list[str]:
    return [name for name in registry.names() if registry.get(name).corpus_settings]


def cmd_corpus_build(args) -> int:
    environment = registry.get(args.benchmark)
    if args.setting not in environment.corpus_settings:
        raise UserError(f"--setting {args.setting}: {args.benchmark} builds {', '.join(environment.corpus_settings)}")

    def say(text: str) -> None:
        if not args.quiet:
            print(f"  {text}", file=sys.stderr, flush=True)

    say(f"building the {args.setting} {args.benchmark} corpus (train split, seed {args.seed}) into {args.out}")
    info = environment.build_corpus(args.out, args.setting, args.seed, categories=args.categories, limit=args.limit,
                                    progress=say, max_records=args.max_records)
    print(f"{info['records']} records from {info['tasks']} train tasks, {info['success']} successful, "
          f"{info['bytes'] / 1e6:.1f} MB in {info['seconds']:.1f} s")
    print("by category: " + ", ".join(f"{k} {v}" for k, v in info["by_variant"].items()))
    if info.get("noise"):
        print("noise (in noise_labels.json, not in the records): "
              + ", ".join(f"{k} {v}" for k, v in info["noise"].items()))
    if info.get("skipped_unaccepted_gold"):
        print(f"left out (gold answer not accepted by the checker): {', '.join(info['skipped_unaccepted_gold'])}")
    print(f"corpus: {Path(args.out) / info['file']}")
    return 0


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("corpus", help="build the default raw corpora")
    sub = p.add_subparsers(dest="corpus_command", required=True, metavar="ACTION")
    b = sub.add_parser("build", help="build a raw corpus from a benchmark's train split")
    builders = _builders()
    b.add_argument("benchmark", type=registry.given, choices=builders, help="whose train split the corpus is built from")
    b.add_argument("--setting", required=True, choices=sorted({s for n in builders for s in registry.get(n).corpus_settings}),
                   help="labeled: executed ground truth; wild: seeded realistic noise, outcomes judged honestly")
    b.add_argument("--out", required=True, type=Path,
                   help="output directory (corpus.jsonl, build.json, and noise_labels.json for wild)")
    b.add_argument("--seed", type=int, default=0, help="seed of the noise draws (wild setting)")
    b.add_argument("--categories", nargs="+", metavar="C",
                   help="bfcl: base miss_func miss_param long_context (default all); "
                        "bfcl-single: simple_python multiple parallel parallel_multiple irrelevance (default all)")
    b.add_argument("--limit", type=positive_int, help="only the first N train tasks (for a quick look)")
    b.add_argument("--max-records", type=positive_int,
                   help="only whole train tasks, seeded and balanced over categories, up to N wild records "
                        "(a training budget; both settings take the same tasks; default: all)")
    b.add_argument("--quiet", action="store_true", help="no progress messages")
    b.set_defaults(func=cmd_corpus_build)
