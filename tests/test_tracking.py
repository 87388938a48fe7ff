"""Trackers: `--report-to` names TRL's integrations; per-epoch numbers reach the same trackers."""
import importlib.util

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from base.errors import UserError
from trainer import tracking


def test_report_to_names_are_checked_before_any_work():
    assert tracking.check_report_to("none") == [] and tracking.check_report_to(None) == []
    assert tracking.check_report_to("tensorboard") == ["tensorboard"]
    with pytest.raises(UserError, match="--report-to comet: unknown tracker"):
        tracking.check_report_to("tensorboard,comet")
    with pytest.raises(UserError, match="cannot be combined"):
        tracking.check_report_to(["none", "tensorboard"])
    for name in ("wandb", "trackio", "mlflow"):
        if importlib.util.find_spec(name) is None:  # not installed here: one sentence naming the fix
            with pytest.raises(UserError, match=f"needs the {name} package: pip install {name}"):
                tracking.check_report_to(name)


def test_epoch_metrics_reach_tensorboard_as_scalars_per_epoch(tmp_path):
    for epoch, (p, accepted) in enumerate([(0.2, True), (0.25, False)]):
        logged = tracking.log_epoch_metrics("tensorboard", tmp_path, epoch, {
            "P": p, "C": 0.58, "J": p - 0.1 * 0.58, "accepted": accepted, "decision": "accept",
            "P_category": {"simple_python": p, "multiple": 0.1}, "scale": {"sft.jsonl": 1230}})
    assert logged == {"P": 0.25, "C": 0.58, "J": 0.25 - 0.058, "accepted": 0.0, "P_category/simple_python": 0.25,
                      "P_category/multiple": 0.1, "scale/sft.jsonl": 1230.0}
    events = EventAccumulator(str(tmp_path / "tensorboard" / "epochs"))
    events.Reload()
    # one event file per epoch; files written in the same second are read in name order, whose writer
    # counter sorts as text (".10" before ".9"): TensorBoard plots by step, so the test reads by step too
    assert sorted((e.step, round(e.value, 4)) for e in events.Scalars("epoch/P")) == [(0, 0.2), (1, 0.25)]
    assert [e.value for e in sorted(events.Scalars("epoch/accepted"), key=lambda e: e.step)] == [1.0, 0.0]
    assert "epoch/P_category/simple_python" in events.Tags()["scalars"]
