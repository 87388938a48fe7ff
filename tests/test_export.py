"""`curateevo export verl`: the bundled corpus's curated artifacts as verl parquet (read back with
pyarrow as verl reads them), the reward module verl loads by path, and one-line refusals."""
import importlib.util
import json

import pyarrow.parquet as pq
import pytest

from evolver.cli import main
from conftest import curate_files
from sandbox.process_executor import ProcessExecutor
from chat_format import chat_format as cf
from trainer.export import export_verl
from trainer.recipe import RECIPE

from conftest import read_artifact

AGENTREFINE = "curation_strategies/agentrefine"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, sample_corpus):
    out = tmp_path_factory.mktemp("curated") / "artifacts"
    curate_files(AGENTREFINE, [sample_corpus], out, executor=ProcessExecutor())
    return out


def _jsonl(path):
    return read_artifact(path)   # the records, decoded from the artifact's file form


def _load_reward(path):
    spec = importlib.util.spec_from_file_location("exported_reward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score


def test_export_writes_verl_parquet_the_reward_module_and_the_launch_command(artifacts, tmp_path, capsys):
    out = tmp_path / "verl"
    assert main(["export", "verl", str(artifacts), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["export.json", "launch.sh", "reward.py", "rl.parquet", "sft.parquet"]
    rl_records, sft_records = _jsonl(artifacts / "rl.jsonl"), _jsonl(artifacts / "sft.jsonl")

    rl = pq.read_table(out / "rl.parquet").to_pylist()
    assert len(rl) == len(rl_records) > 0
    first, record = rl[0], rl_records[0]
    assert set(first) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert first["data_source"] == f"curateevo/{record['reward']}" and first["ability"] == "tool_use"
    assert first["reward_model"]["style"] == "rule"
    assert json.loads(first["reward_model"]["ground_truth"]) == record["reference"]
    assert json.loads(first["extra_info"]["record"]) == record
    # the prompt: the tools block in the system message, then the prefix; it ends before the answer
    assert first["prompt"][0]["role"] == "system" and cf.render_tools(record["tools"]) in first["prompt"][0]["content"]
    assert [m["role"] for m in first["prompt"][1:]] == [m["role"] for m in record["messages"] if m["role"] != "system"]
    assert first["prompt"][-1]["role"] in ("user", "tool")

    sft = pq.read_table(out / "sft.parquet").to_pylist()
    assert len(sft) == len(sft_records)
    calls = [(m, r) for r in sft_records for m in r["messages"] if m.get("tool_calls")]
    message, rec = calls[0]
    row = sft[sft_records.index(rec)]
    assert cf.render_assistant(cf.normalize_messages([message])[0]) in [m["content"] for m in row["messages"]]
    masked = sum(r.get("weights", []).count(0) for r in sft_records)
    summary = json.loads((out / "export.json").read_text())
    assert summary["weight0_turns"] == masked > 0 and "trains every assistant turn" in summary["warnings"][0]
    assert "warning:" in capsys.readouterr().out

    script = (out / "launch.sh").read_text()
    for option in (f"actor_rollout_ref.actor.kl_loss_coef={RECIPE.kl_beta}", f"actor_rollout_ref.rollout.n=8",
                   f"actor_rollout_ref.actor.clip_ratio={RECIPE.ratio_clip}", "algorithm.adv_estimator=grpo",
                   f"reward.custom_reward_function.path={out.resolve()}/reward.py", f"model.lora_rank={RECIPE.lora_r}",
                   f"data.train_files={out.resolve()}/sft.parquet", "data.max_length=8192"):
        assert option in script, option


def test_compute_score_scores_a_right_and_a_wrong_completion(artifacts, tmp_path):
    export_verl(artifacts, tmp_path / "verl")
    compute_score = _load_reward(tmp_path / "verl" / "reward.py")
    row = pq.read_table(tmp_path / "verl" / "rl.parquet").to_pylist()[0]
    reference = json.loads(row["reward_model"]["ground_truth"])["tool_calls"]
    right = "\n".join(cf.render_tool_call(c) for c in reference) + cf.STOP + "trailing text after the turn"
    args = (row["data_source"], row["reward_model"]["ground_truth"], row["extra_info"])
    assert compute_score(args[0], right, *args[1:]) == 1.0
    assert compute_score(args[0], "I would rather not call anything.", *args[1:]) == 0.0
    assert compute_score(args[0], "<tool_call>{not json", *args[1:]) == -0.5
    with pytest.raises(ValueError, match="no 'record'"):
        compute_score(args[0], right, args[1], {"index": 0})


def test_bad_exports_are_one_line_errors_and_write_nothing(artifacts, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rl.jsonl").write_text('{"id": "r1"}\n')
    out = str(tmp_path / "out")
    for argv, message in [([str(tmp_path / "empty"), "--out", out], "has no SFT or RL records"),
                          ([str(artifacts), "--out", str(full)], "not an empty directory"),
                          ([str(bad), "--out", out], "rl.jsonl:1: not a valid RL record")]:
        code = main(["export", "verl", *argv])
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.strip().count("\n") == 0, (argv, err)
    with pytest.raises(SystemExit) as exit_:   # --profile lists its choices: argparse's one line, exit 2
        main(["export", "verl", str(artifacts), "--out", out, "--profile", "huge"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "invalid choice: 'huge'" in err and err.strip().count("\n") == 0, err
    assert not (tmp_path / "out").exists() and [p.name for p in full.iterdir()] == ["x"]
