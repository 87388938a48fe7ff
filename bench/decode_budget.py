"""The evaluation's decoding budget (`max_new_tokens`), chosen on the tuning slice by a criterion written first.

    .venv/bin/python bench/decode_budget.py --run runs/search-e5 [--epochs 0,4] [--budgets 128,256] \
        [--dir runs/decode-budget] [--out bench/results/decode-budget-cpu-small-DATE.json]

The default budget (environments/policies/limits.py) cuts an answer longer than it, and a cut call
fails. How many answers need more is read off data no dev or test task is in: the gold answers
of bfcl-single's tuning slice and the assistant turns of the run's corpus, tokenized as the
policy writes them (chat_format.chat_format). For each epoch's seed-0 adapter and memory bank of
`--run`, each budget is evaluated on the tuning slice as `curateevo eval --split tune` does
(experiments.train_eval.evaluate_on, the loop's evaluation; an evaluation already in `--dir` is read,
not redone), and the table gives P per category, the answers that ran to the budget, the decoding
time and the paired difference in P with the first budget.

The criterion (set while the first larger budget's evaluation ran, before any result of it was
read): a larger budget becomes the default when (1) it covers every assistant turn of the default
corpus — what the model is trained to write must fit in what evaluation lets it write —, (2) P on
the slice is not lower at it for any adapter, and (3) its decoding time keeps a quiet default epoch
within 20 minutes (today's evaluation, 284–292 s of the epoch's ~15 min, times the measured ratio).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def lengths(texts, tokenizer) -> list[int]:
    """Tokens of each rendered answer, with the end-of-turn marker the policy also writes."""
    return sorted(len(tokenizer(t)["input_ids"]) + 1 for t in texts)


def over(values: list[int], budgets: list[int]) -> dict:
    return {"n": len(values), "max": max(values), **{f"over_{b}": sum(v > b for v in values) for b in budgets}}


def gold_lengths(budgets: list[int], corpus: list[Path], tokenizer) -> dict:
    """How many tuning-slice gold answers (per category) and corpus assistant turns exceed each budget."""
    from environments.bfcl.common import tool_call_message
    from environments.bfcl.single_turn import SingleTurnBenchmark
    from base.files import read_jsonl
    from chat_format.chat_format import render_assistant

    bench = SingleTurnBenchmark()
    by_cat: dict[str, list[str]] = {}
    for task in bench.tasks("tune"):
        calls = bench.gold(task.id)
        if calls:
            by_cat.setdefault(task.category, []).append(
                render_assistant(tool_call_message([(f"c{i}", n, a) for i, (n, a) in enumerate(calls)])))
    turns = [render_assistant(m) for f in corpus for r in read_jsonl(f)
             for m in r.get("messages", []) if m.get("role") == "assistant"]
    return {"tune_gold": {c: over(lengths(t, tokenizer), budgets) for c, t in by_cat.items()},
            "corpus_turns": over(lengths(turns, tokenizer), budgets), "corpus": [f.name for f in corpus]}


def evaluation(run: Path, epoch: int, budget: int, folder: Path) -> Path:
    """The epoch's seed-0 adapter with its bank on the tuning slice at `budget` (made once)."""
    out = folder / f"e{epoch}-n{budget}"
    if not (out / "metrics.json").is_file():
        from environments.evaluate import EvalSpec
        from experiments.train_eval import evaluate_on

        e = run / "epochs" / str(epoch)
        evaluate_on(EvalSpec(max_new_tokens=budget, tasks=120), "tune", out, base="smollm2-135m",
                    adapter=str(e / "train-s0" / "adapter"), memory=e / "artifacts" / "memory.jsonl", seed=0)
    return out


def reading(out: Path, budget: int, tokenizer) -> dict:
    from chat_format.chat_format import render_assistant

    metrics = json.loads((out / "metrics.json").read_text())
    scores, at_budget = {}, 0
    for line in (out / "trajectories.jsonl").read_text().splitlines():
        t = json.loads(line)
        scores[t["id"]] = [float(bool(t["outcome"]["success"]))]
        errors = t["meta"].get("format_errors") or []
        answers = [m for m in t["messages"] if m["role"] == "assistant"]
        text = errors[0]["text"] if errors else (render_assistant(answers[0]) if answers else "")
        at_budget += len(tokenizer(text)["input_ids"]) >= budget - 1
    policy = metrics["timing"]["policy"]
    return {"budget": budget, "P": metrics["P"], "successes": {c: v["successes"] for c, v in metrics["per_category"].items()},
            "answers_at_budget": at_budget, "decode_s": round(policy["generate_s"], 1),
            "generated_tokens": policy["generated_tokens"], "scores": scores}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/decode_budget.py", description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True, help="a finished run: its epochs' seed-0 adapters and banks")
    p.add_argument("--epochs", default="0,4")
    p.add_argument("--budgets", default="128,256")
    p.add_argument("--dir", type=Path, default=ROOT / "runs" / "decode-budget", help="where the evaluations go (reused)")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    from experiments.quality import stats
    from trainer.models import load_tokenizer, resolve

    tokenizer = load_tokenizer(resolve("smollm2-135m"))
    budgets = [int(b) for b in a.budgets.split(",")]
    files = json.loads((a.run / "run.json").read_text())["corpus"]   # the run's corpus files
    doc = {"kind": "decode-budget", "date": datetime.date.today().isoformat(),
           "command": "bench/decode_budget.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "lengths": gold_lengths(budgets, [Path(f) for f in files], tokenizer), "adapters": []}
    for epoch in (int(e) for e in a.epochs.split(",")):
        rows = [reading(evaluation(a.run, epoch, b, a.dir), b, tokenizer) for b in budgets]
        for row in rows[1:]:
            row["vs_first"] = stats.paired_difference(row["scores"], rows[0]["scores"])
            row["decode_ratio"] = round(row["decode_s"] / rows[0]["decode_s"], 3)
        for row in rows:
            row.pop("scores")
        doc["adapters"].append({"epoch": epoch, "rows": rows})
        print(json.dumps({"epoch": epoch, "rows": rows}), file=sys.stderr)
    text = json.dumps(doc, indent=2) + "\n"
    if a.out:
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
