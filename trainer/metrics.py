"""Training metrics as JSONL and TensorBoard, one callback for both stages."""
from __future__ import annotations

import json
import math
from pathlib import Path

from transformers import TrainerCallback


class MetricsLog(TrainerCallback):
    """Appends every logged step to `metrics.jsonl` (`{"stage", "step", ...}`) and to TensorBoard
    under `<stage>/<name>`; keeps the rows for the summary."""

    def __init__(self, out_dir: Path, stage: str):
        self.stage = stage
        self.path = Path(out_dir) / "metrics.jsonl"
        self.tb_dir = Path(out_dir) / "tensorboard"
        self.rows: list[dict] = []
        self._writer = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        values = {k: float(v) for k, v in logs.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        row = {"stage": self.stage, "step": state.global_step, **values}
        self.rows.append(row)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.tb_dir))
        for key, value in values.items():
            self._writer.add_scalar(f"{self.stage}/{key}", value, state.global_step)
        self._writer.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def series(self, key: str) -> list[float]:
        """The values of one metric over the steps that logged it (the final summary row excluded)."""
        return [r[key] for r in self.rows if key in r and "train_loss" not in r]
