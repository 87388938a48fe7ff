"""Wall time of one evolution run on `--backend local` and on `--backend ray`, measured in one
sitting, and whether both reached the same decisions and bytes.

    ray start --head --node-ip-address 127.0.0.1 --port 6391 --num-cpus 2 --include-dashboard false
    ray start --address 127.0.0.1:6391 --node-ip-address 127.0.0.1 --num-cpus 2
    .venv/bin/python bench/ray_backend.py --ray-address 127.0.0.1:6391 [--candidates 2] [--seeds 2]

The run is the Ray tests' with a second epoch and k = 2 candidates, whose proxy jobs run on the
cluster too (`test` profile, tiny-random base, 2 epochs, 2 dev tasks; the tests run one epoch);
with `--profile cpu-small` and more tasks it is a real one. The result goes to bench/results/ray_backend.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments import journal  # noqa: E402


def evolution(backend: list[str], runs: Path, name: str, args) -> float:
    argv = [sys.executable, "-m", "evolver.cli", "run", "--profile", args.profile, "--epochs", str(args.epochs),
            "--candidates", str(args.candidates), "--seeds", str(args.seeds), "--tasks", str(args.tasks),
            "--sandbox", "process", "--benchmark", "bfcl-single", "--margin", "0.001", "--batch-size", "2",
            "--corpus", str(ROOT / "environments" / "data" / "sample_corpus.jsonl"), "--runs-dir", str(runs),
            "--name", name, *(["--base", "tiny-random"] if args.profile == "test" else []), *backend]
    t0 = time.monotonic()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def outcome(root: Path) -> dict:
    """Decisions and the bytes of every artifact, adapter and trajectory file: equal across backends."""
    decisions = journal.done(journal.read(root / journal.JOURNAL_FILE), "decide")
    files = sorted(p for pattern in ("epochs/*/artifacts/*.jsonl", "epochs/*/train-s*/adapter/adapter_model.safetensors",
                                     "epochs/*/eval-s*/trajectories.jsonl") for p in root.glob(pattern))
    return {"decisions": [(e.epoch, e.result["accepted"], e.result["J"]) for e in decisions],
            "files": {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ray-address", required=True)
    parser.add_argument("--profile", default="test")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ray_backend.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="curateevo-bench-ray-") as tmp:
        local = evolution([], Path(tmp), "local", args)
        ray = evolution(["--backend", "ray", "--ray-address", args.ray_address], Path(tmp), "ray", args)
        same = outcome(Path(tmp) / "local") == outcome(Path(tmp) / "ray")
    import ray as ray_module

    ray_module.init(address=args.ray_address, logging_level="ERROR")
    nodes = [{"CPU": n["Resources"].get("CPU", 0), "GPU": n["Resources"].get("GPU", 0)}
             for n in ray_module.nodes() if n["Alive"]]
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    result = {"run": {k: getattr(args, k) for k in ("profile", "epochs", "candidates", "seeds", "tasks")},
              "local_s": round(local, 1), "ray_s": round(ray, 1), "ray_over_local": round(ray / local, 3),
              "same_decisions_and_bytes": same, "cluster_nodes": nodes, "machine": platform.node(),
              "load_average_after": load, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
