"""Training metrics as JSONL, one callback for both stages (trackers such as TensorBoard are
TRL's own `report_to` integrations: trainer.tracking)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from transformers import TrainerCallback


class MetricsLog(TrainerCallback):
    """Appends every logged step to `metrics.jsonl` (`{"stage", "step", ...}`); keeps the rows for
    the summary."""

    def __init__(self, out_dir: Path, stage: str):
        self.stage = stage
        self.path = Path(out_dir) / "metrics.jsonl"
        self.rows: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        values = {k: float(v) for k, v in logs.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        row = {"stage": self.stage, "step": state.global_step, **values}
        self.rows.append(row)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")

    def series(self, key: str) -> list[float]:
        """The values of one metric over the steps that logged it (the final summary row excluded)."""
        return [r[key] for r in self.rows if key in r and "train_loss" not in r]
