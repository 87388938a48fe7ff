"""Quirks a whole published format shares are normalised on load and said once (issue 44, item 6);
a folder's non-trajectory files are named, not skipped line by line; the outcome fields published
formats carry are read as the record's outcome (item 7)."""
import json

import pytest

from base.errors import UserError
from curation_strategies import toolkit as tk
from evolver import cli
from corpora import load_corpus


def _adp(i: int, **extra) -> dict:
    """An Agent Data Protocol trajectory as OpenHands exports carry it: a tool without arguments
    whose schema says `"parameters": null`."""
    return {"id": str(i), "content": [
        {"class_": "text_observation", "source": "user", "content": f"fix issue {i} in the repository"},
        {"class_": "api_action", "function": "execute_bash", "kwargs": {"command": f"grep -n bug{i} a.py"},
         "description": "look for it"},
        {"class_": "text_observation", "source": "environment", "content": f"{i}: bug{i}"},
        {"class_": "api_action", "function": "finish", "kwargs": {}, "description": "done"}],
        "tools": [{"type": "function", "function": {"name": "execute_bash", "description": "run a command",
                                                     "parameters": {"type": "object", "properties": {
                                                         "command": {"type": "string"}}}}},
                  {"type": "function", "function": {"name": "finish", "description": "end", "parameters": None}}],
        **extra}


def _write(path, values, array=False):
    path.write_text(json.dumps(values, indent=2) if array else "".join(json.dumps(v) + "\n" for v in values))
    return path


def test_null_parameters_of_a_whole_export_are_read_as_an_empty_schema_and_said_once(tmp_path, capsys):
    path = _write(tmp_path / "openhands.json", [_adp(i) for i in range(6)], array=True)
    corpus = load_corpus([str(path)])
    assert len(corpus.records) == 6 and not corpus.skipped_lines
    finish = [t for t in corpus.records[0]["tools"] if t["function"]["name"] == "finish"]
    assert finish[0]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert corpus.quirks_notice.startswith('6 tool schemas with "parameters": null read as a tool without parameters')
    # the same quirk in OpenAI-format and ShareGPT records
    tools = [{"type": "function", "function": {"name": "now", "parameters": None}}]
    openai = _write(tmp_path / "o.jsonl", [{"messages": [{"role": "user", "content": "time?"}], "tools": tools}])
    sharegpt = _write(tmp_path / "s.jsonl", [{"conversations": [{"from": "human", "value": "time?"}],
                                              "tools": json.dumps([{"name": "now", "parameters": None}])}])
    assert load_corpus([str(openai), str(sharegpt)]).quirks == ((
        'tool schemas with "parameters": null read as a tool without parameters (an empty object schema)', 2),)
    assert cli.main(["curate", "--corpus", str(path), "--sandbox", "process", "--profile", "test",
                     "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert err.count('"parameters": null') == 1 and 'corpus: 6 tool schemas with "parameters": null' in err


def test_a_folder_with_non_trajectory_files_names_them(tmp_path, capsys):
    folder = tmp_path / "dataset"
    folder.mkdir()
    _write(folder / "train.jsonl", [_adp(i) for i in range(3)])
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 32000}))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {"content": {"dtype": "string"}}}))
    with pytest.raises(UserError) as refused:
        load_corpus([str(folder)])
    message = str(refused.value)
    assert str(folder / "config.json") in message and str(folder / "dataset_info.json") in message
    assert "not trajectory files" in message and "move them out of the folder" in message
    assert "skip" not in message
    assert cli.main(["curate", "--corpus", str(folder), "--sandbox", "process", "--out", str(tmp_path / "o")]) == 2
    assert "config.json" in capsys.readouterr().err
    (folder / "config.json").unlink()   # the fix it names
    (folder / "dataset_info.json").unlink()
    assert len(load_corpus([str(folder)]).records) == 3


def test_published_outcome_fields_are_the_records_outcome(tmp_path):
    adp = _write(tmp_path / "adp.jsonl", [_adp(0, details={"resolved": True}), _adp(1, details={"resolved": False}),
                                          _adp(2, resolved=True), _adp(3)])
    outcomes = [r["outcome"] for r in load_corpus([str(adp)]).records]
    assert [o["success"] for o in outcomes] == [True, False, True, None]
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    openai = _write(tmp_path / "o.jsonl", [{"messages": chat, "success": False}, {"messages": chat, "reward": 1.0},
                                           {"messages": chat, "reward": 0.25}, {"messages": chat, "target": True},
                                           {"messages": chat, "outcome": {"success": True, "reward": None}}])
    got = [r["outcome"] for r in load_corpus([str(openai)]).records]
    assert got == [{"success": False, "reward": None}, {"success": True, "reward": 1.0},
                   {"success": False, "reward": 0.25}, {"success": True, "reward": None},
                   {"success": True, "reward": None}]
    sharegpt = _write(tmp_path / "s.jsonl", [{"conversations": [{"from": "human", "value": "hi"},
                                                                {"from": "gpt", "value": "hello"}], "resolved": False}])
    assert load_corpus([str(sharegpt)]).records[0]["outcome"]["success"] is False
    # what the outcome-based operators read: drop_failed keeps the resolved and the unknown
    kept = tk.by_outcome(load_corpus([str(adp)]).records, success=True, keep_unknown=True)
    assert [r["id"] for r in kept] == ["adp/0", "adp/2", "adp/3"]
