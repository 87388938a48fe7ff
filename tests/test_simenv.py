"""ctx.env: train-split BFCL scenarios rebuilt inside the sandbox from a record's meta.env, calls
executed on BFCL's own backend classes (mounted verbatim, no bfcl_eval in the image), schema
checks, validation by execution, a call budget, and nothing of dev or test reachable."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from environments.bfcl import splits
from corpora import load_corpus
from sandbox.curate import execute
from sandbox.executor import Limits
from sandbox.leakage import gold_index
from sandbox.simenv.environment import EnvBudgetExceeded, EnvError, Environment
from sandbox.simenv.export import prepare
from workspace.repository import strategy_files
from conftest import read_artifact

DEV_TASK = {"benchmark": "bfcl_multi_turn", "task_id": "multi_turn_base_2", "variant": "base"}


@pytest.fixture(scope="module")
def records(sample_corpus):
    return [json.loads(line) for line in sample_corpus.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def env_dir(records, tmp_path_factory):
    folder = tmp_path_factory.mktemp("env")
    files, summary = prepare(records + [{"id": "x", "messages": [], "meta": {"env": DEV_TASK}}], folder)
    assert summary == {"bfcl_multi_turn": 33, "bfcl_single_turn": 0, "withheld": 1}
    return folder


def test_the_folder_holds_train_scenarios_and_backend_sources_only(env_dir):
    doc = json.loads((env_dir / "scenarios.json").read_text())
    train = set(splits.multi_turn_split("train"))
    assert all(int(tid.rsplit("_", 1)[1]) in train for tid in doc["scenarios"])
    assert "multi_turn_base_2" not in doc["scenarios"]
    assert sorted(p.name for p in (env_dir / "backends").iterdir()) == [
        "long_context.py", "math_api.py", "message_api.py", "posting_api.py", "ticket_api.py", "travel_booking.py"]
    assert '"ground_truth"' not in (env_dir / "scenarios.json").read_text()
    assert '"question"' not in (env_dir / "scenarios.json").read_text()
    text = "\n".join(p.read_text() for p in env_dir.rglob("*") if p.is_file())
    leaked = [r for r in gold_index().requests if len(r) > 30 and r in text]
    assert leaked == []


def test_a_rebuilt_scenario_returns_the_observations_real_backends_gave(env_dir, records):
    env = Environment(env_dir)
    for record in records[:12]:
        scenario = env.start(record["meta"]["env"])
        observations = [o.content for o in scenario.run(record["messages"])]
        assert observations == [m["content"] for m in record["messages"] if m["role"] == "tool"], record["id"]


def test_errors_are_real_and_nothing_is_evaluated(env_dir, records):
    env = Environment(env_dir)
    scenario = env.start(records[0]["meta"]["env"])
    assert scenario.execute("__import__('os').system('touch /tmp/pwned')").error
    unknown = scenario.execute({"function": {"name": "rm_rf", "arguments": "{}"}})
    assert unknown.error and unknown.content == "Error during execution: name 'rm_rf' is not defined"
    missing = scenario.execute({"function": {"name": "book_flight", "arguments": "{}"}})
    assert missing.error and "missing" in missing.content and "required" in missing.content
    assert not Path("/tmp/pwned").exists()
    assert env.check_call({"function": {"name": "book_flight", "arguments": '{"access_token": 3}'}},
                          scenario.tools) == "book_flight: missing required parameter 'card_id'"


def test_validation_compares_end_state_and_responses_with_a_reference(env_dir, records):
    env = Environment(env_dir)
    record = next(r for r in records if r["outcome"]["success"] and "book_flight" in json.dumps(r["messages"]))
    meta = record["meta"]["env"]
    assert env.validate(record["messages"], record["messages"], meta).valid
    i = next(n for n, m in enumerate(record["messages"])
             if any(c["function"]["name"] == "book_flight" for c in m.get("tool_calls") or ()))
    without = record["messages"][:i] + [m for m in record["messages"][i + 2:]]
    verdict = env.validate(without, record["messages"], meta)
    assert not verdict.valid and "state differs" in verdict.reason


def test_the_call_budget_is_enforced(env_dir, records):
    env = Environment(env_dir, max_calls=3)
    record = next(r for r in records if sum(m["role"] == "tool" for m in r["messages"]) > 3)
    scenario = env.start(record["meta"]["env"])
    with pytest.raises(EnvBudgetExceeded):
        scenario.run(record["messages"])
    assert env.calls == 3


def test_dev_and_test_scenarios_cannot_be_started(env_dir):
    env = Environment(env_dir)
    assert env.start(DEV_TASK) is None and not env.has(DEV_TASK)
    with pytest.raises(EnvError):
        env.tools(DEV_TASK)


HOSTILE = '''
import json, os

def curate(raw, ctx):
    needles = ctx.inputs["needles"]
    found = set()
    for tid in ctx.env.task_ids():
        found.update(n for n in needles if n.strip('"') == tid)
    for n in needles:
        if ctx.env.start({"benchmark": "bfcl_multi_turn", "task_id": n.strip('"')}) is not None:
            found.add(n)
    for root, dirs, files in os.walk("/"):
        if root.startswith(("/proc", "/sys", "/dev", "/job/strategy")):
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(root, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > 8_000_000:
                    continue
                with open(path, "rb") as f:
                    data = f.read()
                if bytes(1) in data[:4096]:   # binaries (.so, wheels' compiled parts) hold no task text
                    continue
                data = data.decode("utf-8", "replace")
            except OSError:
                continue
            found.update(f"{n} in {path}" for n in needles if n in data)
    scenario = ctx.env.start(raw[0]["meta"]["env"])
    obs = scenario.run(raw[0]["messages"])
    record = {"id": raw[0]["id"], "messages": raw[0]["messages"], "tools": raw[0]["tools"],
              "meta": {"origin": [raw[0]["id"]], "found": sorted(found), "observations": [o.content for o in obs]}}
    return {"sft": [record]}
'''


def test_a_hostile_strategy_finds_no_dev_or_test_task_in_the_container(tmp_path, sample_corpus):
    from sandbox.docker_executor import DockerExecutor, docker_client

    held_out = [n for s in ("dev", "test") for n in splits.multi_turn_split(s)]
    needles = [f'"multi_turn_base_{n}"' for n in held_out] + [f'"multi_turn_long_context_{n}"' for n in held_out[:5]]
    needles += [r for r, where in gold_index().requests.items() if len(r) > 40][:40]
    needles += ['"simple_python_0"', '"parallel_0"']   # the first single-turn ids of dev/test, if held out
    needles = [n for n in needles if n.strip('"') not in set(splits.single_turn_split("simple_python", "train"))
               and n.strip('"') not in set(splits.single_turn_split("parallel", "train"))]
    control = '"multi_turn_base_150"'   # a train scenario of the corpus: the search must find it
    needles.append(control)
    folder = tmp_path / "hostile"
    folder.mkdir()
    (folder / "strategy.py").write_text(HOSTILE)
    (folder / "inputs").mkdir()
    (folder / "inputs" / "needles.json").write_text(json.dumps(needles))
    corpus = load_corpus([str(sample_corpus)])
    result = execute(strategy_files(folder), corpus, tmp_path / "out", executor=DockerExecutor(docker_client()),
                     limits=Limits(timeout_s=300))
    meta = read_artifact(result.out_dir / "sft.jsonl")[0]["meta"]
    found = [f for f in meta["found"] if not f.startswith(control)]
    assert found == []
    assert control in meta["found"] and f"{control} in /job/env/scenarios.json" in meta["found"]
    first = corpus.records[0]
    assert meta["observations"] == [m["content"] for m in first["messages"] if m["role"] == "tool"]
    assert result.manifest.env_sha256 and result.execution["env"]["bfcl_multi_turn"] == 33
