"""The plan of a GPU run, in order of value, as units that each finish whole or not at all.

    a. calibration: `bench quality --calibrate` at the plan's profile (paper) on the test split,
       one row (ρ0 wild, oracle, poisoned) per unit, then the calibration's report;
    b. the same rows at the second profile (cpu-small) moved to the plan's device;
    c. throughput (bench/throughput.py): the profile's SFT beside TRL's defaults, and GRPO steps
       split into generation and update, tokens/s and MFU against the card's bf16 peak;
    d. an evolution run (`curateevo run`, resumed when it exists), then `curateevo test` on it: BFCL
       test and the held-out ACEBench and τ² telecom (solo) test splits, the final beside ρ0.

Every unit calls the command that owns it (`curateevo bench quality`, `throughput.measure`,
`curateevo run|resume|test`) in this process; their caches keep every finished cell. A ledger
(`CACHE/gpu-plan.json`) records each unit done with its wall time, so a later invocation skips
it and knows what a unit of that step costs. A unit starts only while the budget lasts (the
invocation's first excepted) and when its step's measured cost fits before the hard stop, at which
the parent (bench/gpu_run.py) stops this process: the unit in flight is lost, nothing else.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class PlanConfig:
    """What one GPU run computes; written into the carry by `pack`, read there by `run`."""

    profile: str = "paper"
    base: str = "smollm2-135m"
    """The base model every training uses (the paper's Qwen3-4B is not carried)."""
    device: str = "cuda"
    rows: tuple[str, ...] = ("rho0-wild", "oracle", "poisoned")
    tasks: int = 120
    seeds: int = 1
    set: tuple[str, ...] = ()
    """Profile overrides (KEY=VALUE) for step a, e.g. the affordable GRPO of issue 42."""
    second_profile: str = "cpu-small"
    second_set: tuple[str, ...] = ()
    """Overrides for step b, e.g. sft_learning_rate=2e-4 once the instrument issue has chosen it."""
    throughput_base: str = "qwen3-4b-arch"
    throughput_sft_steps: int = 6
    throughput_grpo_steps: int = 3
    throughput_short: bool = False
    """The sample corpus cut after each first call (~300 tokens a record instead of ~1,800)."""
    epochs: int = 3
    run_tasks: int = 60
    test_tasks: int = 120
    max_new_tokens: int | None = None
    """The evolution run's decoding budget per turn (None: `run`'s default)."""
    held_out: str | None = None
    """`test --held-out`: the held-out benchmarks scored beside BFCL test (None: `test`'s default, every one
    of the paper's — ACEBench and τ² telecom solo for a run that evolves on bfcl-single — so the unit prints
    the paper's three-benchmark Table 1 for the run)."""
    run_sandbox: str = "auto"
    """The evolution run's executor (the GPU machine may have none: the unit then fails in one sentence)."""
    wild: dict = field(default_factory=dict)
    """{profile: the wild corpus folder's name under STATE/corpora} (set by pack)."""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "PlanConfig":
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()})


@dataclass(frozen=True)
class Unit:
    step: str
    name: str
    run: Callable[[], dict]
    needs_model: bool = True

    @property
    def id(self) -> str:
        return f"{self.step}/{self.name}"


def quality_argv(cfg: PlanConfig, step: str, rows: tuple[str, ...], cache: Path, wild: Path) -> list[str]:
    """`curateevo bench quality` for step a or b on `rows` (pack curates with it, adding --report-only)."""
    profile, extra = (cfg.profile, cfg.set) if step == "calibration" else (cfg.second_profile, cfg.second_set)
    return ["bench", "quality", "--calibrate", "--split", "test", "--tasks", str(cfg.tasks), "--seeds", str(cfg.seeds),
            "--rows", ",".join(rows), "--profile", profile, "--base", cfg.base,
            "--set", f"device={cfg.device}", *extra, "--wild", str(wild), "--cache", str(cache), "--quiet"]


class Plan:
    """The units of `cfg` over the state folder, and the ledger of those done."""

    def __init__(self, cfg: PlanConfig, state: Path, out: Path, runtime: str | None, model_ready: bool):
        self.cfg, self.state, self.out = cfg, Path(state), Path(out)
        self.cache = self.state / "cache"
        self.runtime, self.model_ready = runtime, model_ready
        self.ledger_path = self.cache / "gpu-plan.json"
        self.ledger = json.loads(self.ledger_path.read_text()) if self.ledger_path.is_file() else {}

    # ------------------------------------------------------------------ the units

    def units(self) -> list[Unit]:
        cfg, out = self.cfg, []
        for step, profile in (("calibration", cfg.profile), ("cpu-small", cfg.second_profile)):
            wild = self.state / "corpora" / cfg.wild[profile]
            for row in cfg.rows:
                out.append(Unit(step, row, self._quality(step, (row,), wild)))
            out.append(Unit(step, "report", self._quality(step, cfg.rows, wild, report=True)))
        out.append(Unit("throughput", cfg.throughput_base, self._throughput, needs_model=False))
        out.append(Unit("evolution", "run", self._evolution))
        out.append(Unit("evolution", "test", self._test))
        return out

    def _quality(self, step: str, rows: tuple[str, ...], wild: Path, report: bool = False) -> Callable[[], dict]:
        def run() -> dict:
            from evolver.cli import main

            argv = quality_argv(self.cfg, step, rows, self.cache, wild) + ["--out", str(self.cache / "reports" / step)]
            argv += ["--curated-runtime", self.runtime] if self.runtime else []
            before = set((self.cache / "cells").glob("*/cell.json"))
            printed = _call(main, argv + (["--report-only"] if report else []))
            new = sorted(set((self.cache / "cells").glob("*/cell.json")) - before)
            return {"cells": [self._cell(path) for path in new], **({"report": printed} if report else {})}
        return run

    def _cell(self, path: Path) -> dict:
        """A cell this unit computed: P, and its training's SFT speed and GRPO step split."""
        cell = json.loads(path.read_text())
        summary = self.cache / "trainings" / str(cell.get("training")) / "summary.json"
        trained = json.loads(summary.read_text()) if summary.is_file() else {}
        return {"seed": cell["seed"], "P": cell["P"], "sft": _pick(trained.get("sft")), "grpo": _pick(trained.get("grpo")),
                "eval_wall_s": cell.get("eval_wall_s")}

    def _throughput(self) -> dict:
        sys.path.insert(0, str(ROOT / "bench"))
        import throughput

        from trainer.cli import parse_budget

        sft, rl = throughput.sample_records(short=self.cfg.throughput_short)
        result = throughput.measure(self.cfg.profile, self.cfg.throughput_base, sft, rl, sft_steps=self.cfg.throughput_sft_steps,
                                    grpo_steps=self.cfg.throughput_grpo_steps,
                                    **parse_budget([f"device={self.cfg.device}", *self.cfg.set]))
        (self.cache / "throughput.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return {"table": throughput.format_result(result)}

    def _run_dir(self) -> Path:
        return self.cache / "runs" / f"evolution-{self.cfg.profile}"

    def _evolution(self) -> dict:
        from evolver.cli import main

        run = self._run_dir()
        if (run / "run.json").is_file():
            return {"printed": _call(main, ["resume", str(run)])}
        wild = self.state / "corpora" / self.cfg.wild[self.cfg.profile] / "corpus.jsonl"
        return {"printed": _call(main, ["run", "--profile", self.cfg.profile, "--base", self.cfg.base, "--epochs",
                                        str(self.cfg.epochs), "--benchmark", "bfcl-single", "--corpus", str(wild),
                                        "--tasks", str(self.cfg.run_tasks), "--proposer", "offline",
                                        "--sandbox", self.cfg.run_sandbox, "--runs-dir", str(run.parent), "--name", run.name,
                                        *(["--max-new-tokens", str(self.cfg.max_new_tokens)] if self.cfg.max_new_tokens else [])])}

    def _test(self) -> dict:
        from evolver.cli import main

        return {"printed": _call(main, ["test", str(self._run_dir()), "--tasks", str(self.cfg.test_tasks),
                                        *(["--held-out", self.cfg.held_out] if self.cfg.held_out else [])])}

    # ------------------------------------------------------------------ the ledger

    def key(self, unit: Unit) -> str:
        """A unit's ledger key: its id and the plan settings it depends on."""
        digest = hashlib.sha256(json.dumps([unit.id, self.cfg.to_json()], sort_keys=True).encode()).hexdigest()[:12]
        return f"{unit.id}@{digest}"

    def done(self, unit: Unit) -> bool:
        return self.ledger.get(self.key(unit), {}).get("status") == "done"

    def estimate(self, unit: Unit) -> float | None:
        """The longest measured unit of this step (None: none measured yet)."""
        times = [e["seconds"] for k, e in self.ledger.items() if k.startswith(unit.step + "/") and "seconds" in e
                 and e.get("status") == "done" and not k.startswith(unit.step + "/report")]
        return max(times) if times and not unit.name == "report" else None

    def record(self, unit: Unit, entry: dict) -> None:
        self.ledger[self.key(unit)] = {"unit": unit.id, **entry}
        self.save()

    def save(self) -> None:
        self.ledger_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.ledger_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.ledger, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.ledger_path)


def _pick(summary: dict | None) -> dict | None:
    if not summary:
        return None
    keys = ("steps", "wall_s", "tokens_per_s", "loss_last", "step_generation_s", "step_update_s", "completions", "completion_tokens")
    return {k: summary[k] for k in keys if k in summary}


def _call(main: Callable[[list[str]], int], argv: list[str]) -> str:
    """Run a `curateevo` command in this process; its stdout is returned (and echoed), a non-zero
    exit is an error naming the command."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(argv)
    sys.stdout.write(buffer.getvalue())
    if code:
        raise RuntimeError(f"`curateevo {' '.join(argv[:2])}` exited {code}")
    return buffer.getvalue()[-4000:]


def execute(plan: Plan, start_until: float, hard_stop: float, say: Callable[[str], None],
            after: Callable[[list[dict]], None] = lambda done: None) -> list[dict]:
    """Run the plan's units in order under the budget; returns what each unit did this time."""
    this_time, started = [], False
    for unit in plan.units():
        if plan.done(unit):
            this_time.append({"unit": unit.id, "status": "cached"})
            continue
        if unit.needs_model and not plan.model_ready:
            this_time.append({"unit": unit.id, "status": "waiting", "why": "the model's parts have not all arrived"})
            continue
        now, estimate = time.time(), plan.estimate(unit)
        if started and now >= start_until:
            this_time.append({"unit": unit.id, "status": "not started", "why": "the budget is spent"})
            continue
        if estimate is not None and now + estimate > hard_stop:
            this_time.append({"unit": unit.id, "status": "not started",
                              "why": f"its step's units took {estimate:.0f} s, {hard_stop - now:.0f} s are left"})
            continue
        started = True
        say(f"gpu run: {unit.id} …")
        plan.record(unit, {"status": "running", "started": now})
        try:
            result = unit.run()
        except Exception as exc:   # a unit that fails is recorded and the plan goes on
            entry = {"status": "failed", "seconds": round(time.time() - now, 1), "why": f"{type(exc).__name__}: {exc}"}
        else:
            entry = {"status": "done", "seconds": round(time.time() - now, 1), "result": result}
        plan.record(unit, entry)
        this_time.append({"unit": unit.id, **{k: v for k, v in entry.items() if k != "result"}})
        say(f"gpu run: {unit.id} {entry['status']} in {entry['seconds']} s" + (f": {entry['why']}" if "why" in entry else ""))
        after(this_time)
    return this_time
