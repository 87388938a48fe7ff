"""ctx.llm against a real model server (issue 73): a candidate's augmentation requests cross the
host's channel to `transformers serve` over the embedded SmolLM2-135M (the suite's `model_server`),
its replies land in the curated memory, and an offline re-execution with no server is byte-identical."""
from __future__ import annotations

from corpora import load_corpus
from evolver.llm import LLM, LLMConfig
from evolver.stages import channel_answer
from sandbox.curate import execute
from sandbox.docker_executor import DockerExecutor, docker_client

from conftest import read_artifact
from test_llm_channel import ARTIFACTS, strategy

AUGMENTS = '''
def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    for record in raw[:2]:
        text = ctx.llm.complete([{"role": "user", "content": "One hint for: " + record["task"]}], max_tokens=12)
        out.memory.append(tk.memory_record(record["task"][:60], text, id=f"hint-{record['id']}"))
    out.sft.append(tk.sft_record(raw[0], tags=["augmented"]))
    return out
'''


def real_llm(model_server, record_dir, mode="record") -> LLM:
    url, model = model_server
    return LLM(LLMConfig.from_mapping({"provider": "openai", "model": model, "base_url": url, "mode": mode,
                                       "max_tokens": 16}), record_dir)


def test_a_candidates_ctx_llm_is_answered_by_a_real_server_and_replays_offline(model_server, sample_corpus, tmp_path):
    docker = DockerExecutor(docker_client())
    corpus, files = load_corpus([str(sample_corpus)]), strategy(tmp_path, AUGMENTS)
    llm = real_llm(model_server, tmp_path / "llm")
    first = execute(files, corpus, tmp_path / "first", executor=docker, llm=channel_answer(llm))
    memory = read_artifact(first.out_dir / "memory.jsonl")
    assert len(memory) == 2 and all(m["content"].strip() for m in memory), memory   # the model's own words
    assert llm.usage()["calls"] == 2 and llm.usage()["unpriced"] and first.execution["llm"]["requests"] == 2
    offline = real_llm(model_server, tmp_path / "llm", mode="offline")   # no call: every answer from the record
    again = execute(files, corpus, tmp_path / "again", executor=docker, llm=channel_answer(offline))
    for name in ARTIFACTS:
        assert (again.out_dir / name).read_bytes() == (first.out_dir / name).read_bytes(), name
    assert offline.usage()["from_record"] == 2
