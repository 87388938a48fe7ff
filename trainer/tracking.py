"""Experiment trackers: what `--report-to` names reaches TRL's own integrations (`report_to`), and
the run's per-epoch numbers reach the same trackers through `log_epoch_metrics`.

`REPORT_TO`: tensorboard (files under `<out>/tensorboard/<stage>` for training, `<run>/tensorboard/
epochs` for epochs), wandb, trackio, mlflow, or none. Several may be given ("tensorboard,wandb").
A tracker whose package is not installed is refused before any work starts (`check_report_to`).
wandb, trackio and mlflow are configured the usual way (their environment variables: project,
tracking URI, offline mode); nothing here logs in or sends anything on its own.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Iterable, Mapping

from base.errors import UserError

REPORT_TO = ("tensorboard", "wandb", "trackio", "mlflow", "none")
DEFAULT_REPORT_TO = "tensorboard"
PROJECT = "curateevo"
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio", "mlflow": "mlflow"}


def check_report_to(value: str | Iterable[str] | None) -> list[str]:
    """The trackers named by `value` ("tensorboard", "wandb,mlflow", a list, "none" or None: []);
    UserError (one sentence) for an unknown name or a tracker whose package is missing."""
    names = value.split(",") if isinstance(value, str) else list(value or [])
    names = [n.strip() for n in names if n.strip()]
    for name in names:
        if name not in REPORT_TO:
            raise UserError(f"--report-to {name}: unknown tracker (one or more of {', '.join(REPORT_TO)}, "
                            "comma-separated)")
    if "none" in names:
        if len(names) > 1:
            raise UserError("--report-to none cannot be combined with a tracker")
        return []
    for name in names:
        if importlib.util.find_spec(_PACKAGES[name]) is None:
            raise UserError(f"--report-to {name} needs the {_PACKAGES[name]} package: pip install {_PACKAGES[name]}")
    return names


def trl_report_to(trackers: list[str], out: Path, stage: str) -> dict:
    """TrainingArguments for one training stage: TRL's `report_to` and a run name; TensorBoard
    event files go to `<out>/tensorboard/<stage>` (transformers reads TENSORBOARD_LOGGING_DIR)."""
    if "tensorboard" in trackers:
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(Path(out) / "tensorboard" / stage)
    return {"report_to": trackers or "none", "run_name": f"{Path(out).name}-{stage}"}


def scalars(metrics: Mapping, prefix: str = "") -> dict[str, float]:
    """The finite numbers of `metrics` (nested mappings flattened with "/", booleans as 0/1)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(scalars(value, name + "/"))
        elif isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[name] = float(value)
    return out


def log_epoch_metrics(report_to: str | Iterable[str] | None, run_dir: str | Path, epoch: int,
                      metrics: Mapping) -> dict[str, float]:
    """Log one epoch's numbers (e.g. P, C, J, accepted, per-category P, scale) to the trackers, at
    step `epoch`; returns the scalars logged. Strings (a decision's name) are left out: pass
    them as numbers (accepted: 1/0). Every tracker gets the same run name (the run directory's)."""
    trackers = check_report_to(report_to)
    values = scalars(metrics)
    run_dir = Path(run_dir)
    for tracker in trackers:
        _LOGGERS[tracker](run_dir, epoch, values)
    return values


def _tensorboard(run_dir: Path, epoch: int, values: dict) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(run_dir / "tensorboard" / "epochs")) as writer:
        for key, value in values.items():
            writer.add_scalar(f"epoch/{key}", value, epoch)


def _wandb(run_dir: Path, epoch: int, values: dict) -> None:
    import wandb

    run = wandb.run or wandb.init(project=os.environ.get("WANDB_PROJECT", PROJECT), name=run_dir.name,
                                  id=_run_id(run_dir), resume="allow", dir=str(run_dir))
    run.log({**{f"epoch/{k}": v for k, v in values.items()}, "epoch": epoch})


def _trackio(run_dir: Path, epoch: int, values: dict) -> None:
    import trackio

    trackio.init(project=os.environ.get("TRACKIO_PROJECT", PROJECT), name=run_dir.name, resume="allow")
    trackio.log({f"epoch/{k}": v for k, v in values.items()}, step=epoch)


def _mlflow(run_dir: Path, epoch: int, values: dict) -> None:
    import mlflow

    ids = run_dir / "mlflow_run.json"  # one MLflow run per evolution run, across processes
    run_id = json.loads(ids.read_text())["run_id"] if ids.is_file() else None
    with mlflow.start_run(run_id=run_id, run_name=None if run_id else run_dir.name) as run:
        if run_id is None:
            ids.write_text(json.dumps({"run_id": run.info.run_id}) + "\n")
        mlflow.log_metrics({f"epoch/{k}": v for k, v in values.items()}, step=epoch)


def _run_id(run_dir: Path) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in run_dir.resolve().name)[:64]


_LOGGERS = {"tensorboard": _tensorboard, "wandb": _wandb, "trackio": _trackio, "mlflow": _mlflow}
