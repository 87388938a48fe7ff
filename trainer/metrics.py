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


class ConsoleProgress(TrainerCallback):
    """The console view of a training stage: one labelled bar ("SFT", "GRPO") with the step count
    and ETA, and a line every `every` steps with the stage's main numbers — instead of
    transformers' dict of every logged step. metrics.jsonl still records every step."""

    KEYS = {"sft": ("loss", "mean_token_accuracy", "train_tokens_per_second"), "grpo": ("reward", "kl", "step_time")}

    def __init__(self, stage: str, every: int = 10, stream=None):
        import sys

        self.stage, self.every, self.stream = stage, every, stream or sys.stderr
        self.bar = None

    def on_train_begin(self, args, state, control, **kwargs):
        from trainer.progress import progress_bar

        if state.is_world_process_zero:
            self.bar = progress_bar(state.max_steps, self.stage.upper(), "step", self.stream)

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs or "train_loss" in logs:   # the closing summary is not a step
            return
        shown = {k: logs[k] for k in self.KEYS[self.stage] if isinstance(logs.get(k), (int, float))}
        if shown:
            self.bar.set_postfix({k.split("_")[0]: f"{v:.4g}" for k, v in shown.items()}, refresh=False)
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            numbers = " · ".join(f"{k} {v:.4g}" for k, v in shown.items())
            self.bar.write(f"{self.stage.upper()} step {state.global_step}/{state.max_steps}: {numbers}", file=self.stream)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def console(trainer, stage: str, progress: bool) -> None:
    """Replace transformers' console printing (a dict per logged step) with ConsoleProgress."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if progress:
        trainer.add_callback(ConsoleProgress(stage))
