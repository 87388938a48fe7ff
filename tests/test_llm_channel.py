"""ctx.llm: the candidate's requests cross a unix socket the host serves; the host's LLM layer
(evolver/llm.py, on a scripted server here) answers with its records; budgets are the
host's; the manifest names the records the execution used, and a offline re-execution with
the server gone is byte-identical."""
from __future__ import annotations

import json

import pytest
from llm_server import llm_server  # noqa: F401  (the fixture)

from evolver.llm import LLM, LLMConfig
from evolver.stages import channel_answer
from corpora import load_corpus
from sandbox.curate import CurationFailed, execute
from sandbox.docker_executor import DockerExecutor, docker_client
from sandbox.executor import Limits
from sandbox.llm_channel import LLMBudget
from workspace.repository import strategy_files
from conftest import read_artifact

CANARY = "sk-canary-channel-7"
ARTIFACTS = ("sft.jsonl", "rl.jsonl", "memory.jsonl", "profile.json", "manifest.json")

# Uses ctx.env and ctx.llm: one memory record per first request, its content the LLM's reply,
# plus what the strategy could see of a key anywhere it can look.
USES_BOTH = '''
import json, os

def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    looked = repr(dict(os.environ))
    for root in ("/job", "/tmp", "/out"):
        for folder, _, files in os.walk(root):
            for name in files:
                try:
                    looked += open(os.path.join(folder, name), errors="replace").read()
                except OSError:
                    pass
    for record in raw[:3]:
        scenario = ctx.env.start(record["meta"]["env"])
        first = scenario.run(record["messages"])[0]
        text = ctx.llm.complete([{"role": "user", "content": "Hint for: " + record["task"]}], max_tokens=32)
        looked += text
        out.memory.append(tk.memory_record(record["task"][:60], f"{text} (first result: {first.content[:40]})",
                                           id=f"hint-{record['id']}"))
    out.sft.append(tk.sft_record(raw[0], tags=["key-seen" if "sk-" + "canary-channel" in looked else "no-key"]))
    return out
'''

FLOOD = '''
def curate(raw, ctx):
    for n in range(100):
        try:
            ctx.llm.complete([{"role": "user", "content": f"again {n}"}], max_tokens=8)
        except Exception:
            pass   # a strategy that swallows the refusal still fails: the host decides
    return ctx.toolkit.Curated(sft=[ctx.toolkit.sft_record(raw[0])])
'''


answer_with = channel_answer   # the loop's binding: a channel request → the run's LLM layer → the response


def make_llm(server, record_dir, mode="record"):
    return LLM(LLMConfig.from_mapping({"provider": "openai", "model": "gpt-4o", "api_key_env": "CHANNEL_KEY",
                                       "base_url": server.openai_url, "mode": mode}), record_dir)


@pytest.fixture(scope="module")
def docker():
    return DockerExecutor(docker_client())


def strategy(tmp_path, code):
    folder = tmp_path / "strategy"
    folder.mkdir(exist_ok=True)
    (folder / "strategy.py").write_text(code)
    return strategy_files(folder)


def test_replay_from_the_records_is_byte_identical_without_the_server(llm_server, docker, sample_corpus,
                                                                       tmp_path, monkeypatch):
    monkeypatch.setenv("CHANNEL_KEY", CANARY)
    llm_server.script(*(f"Check the {w} first." for w in ("airport", "card", "budget")))
    corpus, files = load_corpus([str(sample_corpus)]), strategy(tmp_path, USES_BOTH)
    first = execute(files, corpus, tmp_path / "first", executor=docker,
                    llm=answer_with(make_llm(llm_server, tmp_path / "llm")))
    assert len(llm_server.requests) == 3
    assert llm_server.requests[0].headers["authorization"] == f"Bearer {CANARY}"   # the host's key, the host's call
    memory = read_artifact(first.out_dir / "memory.jsonl")
    assert [m["content"].split(" (")[0] for m in memory] == ["Check the airport first.", "Check the card first.",
                                                             "Check the budget first."]
    assert read_artifact(first.out_dir / "sft.jsonl")[0]["meta"]["tags"] == ["no-key"]
    assert first.manifest.llm_record_sha256 and first.execution["llm"]["requests"] == 3

    llm_server.stop()
    replayed = execute(files, corpus, tmp_path / "replayed", executor=docker,
                       llm=answer_with(make_llm(llm_server, tmp_path / "llm", mode="offline")))
    assert len(llm_server.requests) == 3   # no new request
    for name in ARTIFACTS:
        assert (replayed.out_dir / name).read_bytes() == (first.out_dir / name).read_bytes(), name


def test_flooding_the_channel_fails_the_candidate_on_the_budget(docker, sample_corpus, tmp_path):
    answered = []

    def answer(request):
        answered.append(request)
        return {"text": "ok", "prompt_tokens": 3, "completion_tokens": 1}

    with pytest.raises(CurationFailed) as info:
        execute(strategy(tmp_path, FLOOD), load_corpus([str(sample_corpus)]), tmp_path / "out", executor=docker,
                llm=answer, llm_budget=LLMBudget(max_requests=5), limits=Limits(timeout_s=120))
    assert info.value.reason == "the candidate's LLM budget of 5 requests is spent"
    assert len(answered) == 5 and not (tmp_path / "out").exists()


def test_a_failing_llm_fails_the_candidate_and_malformed_requests_are_refused(docker, sample_corpus, tmp_path):
    def answer(request):
        raise RuntimeError("LLM request 3f2a-0.json (curate) is not in the record (offline run)")

    with pytest.raises(CurationFailed) as info:
        execute(strategy(tmp_path, FLOOD), load_corpus([str(sample_corpus)]), tmp_path / "out", executor=docker,
                llm=answer, limits=Limits(timeout_s=120))
    assert info.value.reason.startswith("the host's LLM could not answer: LLM request 3f2a-0.json")


def test_without_an_llm_ctx_llm_is_none_and_the_manifest_says_so(docker, sample_corpus, tmp_path):
    code = '''
def curate(raw, ctx):
    assert ctx.llm is None and ctx.env is not None
    return ctx.toolkit.Curated(sft=[ctx.toolkit.sft_record(raw[0])])
'''
    result = execute(strategy(tmp_path, code), load_corpus([str(sample_corpus)]), tmp_path / "out", executor=docker)
    assert result.manifest.llm_record_sha256 is None and result.execution["llm"] is None


def test_the_channel_checks_each_request(tmp_path):
    import socket

    from sandbox.llm_channel import LLMChannel
    from sandbox.llm_client import LLMClient, LLMError

    seen = []
    with LLMChannel(lambda r: seen.append(r) or {"text": "fine", "prompt_tokens": 2, "completion_tokens": 1},
                    LLMBudget(max_tokens_per_request=64), tmp_path / "llm") as channel:
        client = LLMClient(channel.socket)
        assert client.complete([{"role": "user", "content": "hi"}], max_tokens=16) == "fine"
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(str(channel.socket))
            raw.sendall(b'{"messages": [{"role": "tool", "content": "x"}], "max_tokens": 4, "api_key": "k"}\n')
            reply = json.loads(raw.makefile().readline())
        with pytest.raises(LLMError):
            client.complete([{"role": "user", "content": "more"}], max_tokens=16)
    assert seen == [{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}]
    assert reply == {"error": 'a malformed LLM request: expected {"messages": [...], "max_tokens": N}'}
    assert channel.failure == reply["error"] and len(channel.exchanges) == 1
