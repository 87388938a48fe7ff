"""A bounded reply, the context window, and recorded retries: against the real local server
(`transformers serve` over SmolLM2-135M) where the behaviour is the model's, and against the scripted
server (tests/llm_server.py: http.server in a thread) where a server misbehaviour must be injected."""
import json

import pytest
from llm_server import llm_server  # noqa: F401  (the fixture)

from base.files import read_json
from evolver import cli
from evolver.llm import LLM, ContextExceeded, LLMConfig, LLMUnavailable, estimate_prompt_tokens
from evolver.llm_context import SAFETY, record_path
from evolver.llm_diagnose import count_tokens, llm_diagnose, render_prompt

from test_llm import CHAT, canary, make_llm  # noqa: F401  (fixtures)
from test_llm_diagnose import real  # noqa: F401  (fixture)
from experiments.journal import event as journal_event

LONG = [{"role": "user", "content": "Say which tool failed. " + "The agent called get_weather with a wrong date. " * 40}]

VLLM_400 = (b'{"object": "error", "message": "This model\'s maximum context length is 2048 tokens. However, you '
            b'requested 4096 tokens (3072 in the messages, 1024 in the completion). Please reduce the length of the '
            b'messages or completion.", "type": "BadRequestError", "param": null, "code": 400}')
OPENAI_400 = (b'{"error": {"message": "This model\'s maximum context length is 128000 tokens. However, your messages '
              b'resulted in 130000 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", '
              b'"param": "messages", "code": "context_length_exceeded"}}')
LLAMACPP_400 = (b'{"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",'
                b' "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}')
ANTHROPIC_400 = (b'{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 '
                 b'tokens > 200000 maximum"}}')


def real_llm(model_server, record_dir, **options) -> LLM:
    url, model = model_server
    return LLM(LLMConfig.from_mapping({"provider": "openai", "model": model, "base_url": url, **options}), record_dir)


# ------------------------------------------------------------------ the real server: what the model does

def test_a_real_reply_stops_at_max_tokens_and_says_it_was_cut(model_server, tmp_path):
    llm = real_llm(model_server, tmp_path, max_tokens=6, mode="live")
    reply = llm.complete([{"role": "user", "content": "Write a long story about a robot."}], purpose="diagnose",
                         max_tokens=500)   # a call may not ask past the config's bound
    assert 1 <= reply.completion_tokens <= 6 and reply.finish == "length"
    record = read_json(tmp_path / reply.record)
    assert record["request"]["max_tokens"] == 6 and record["response"]["finish"] == "length"
    assert llm.usage()["cut"] == 1 and llm.usage()["unpriced"] and llm.usage()["usd"] == 0.0


def test_the_reply_bound_and_the_window_are_run_options_with_a_bounded_default(capsys):
    assert LLMConfig("openai", "m").max_tokens == 1024 and LLMConfig("openai", "m").context_window is None
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--llm-max-tokens" in text and "(default: 1024)" in text.split("--llm-max-tokens", 2)[-1][:200]
    assert "--llm-context-window" in text and "max_model_len" in text


def test_a_diagnosis_over_a_small_window_trims_its_prompts_and_replays_offline(model_server, tmp_path, real):
    """The real model's degenerate replies are re-asked once and recorded as such; the prompts are cut to
    what the window leaves; an offline rerun with no server gives the same points and statistics."""
    failed = [t for t in real if not (t.get("outcome") or {}).get("success")][:2]
    window, reply = 1200, 8
    llm = real_llm(model_server, tmp_path / "llm", max_tokens=reply, context_window=window)
    points, stats = llm_diagnose(failed, llm, tmp_path / "cache")
    assert stats["stopped"] is None and stats["errors"] == [] and stats["diagnosed"] == len(failed)
    for record in map(read_json, (tmp_path / "llm").glob("*.json")):   # each prompt, re-asks too, left room for its reply
        assert estimate_prompt_tokens(record["request"]["messages"]) * SAFETY <= window - reply
        assert record["request"]["max_tokens"] == reply and "max_tokens_sent" not in record["response"]
    assert all(not r["kept"] or r["reasked"] is not None for r in stats["per_trajectory"])
    offline = LLM(llm.config.model_copy(update={"mode": "offline"}), tmp_path / "llm")   # offline: no network call
    again = llm_diagnose(failed, offline, tmp_path / "cache-offline")
    assert offline.usage()["from_record"] == offline.usage()["calls"] == stats["calls"]
    assert json.dumps(again, sort_keys=True) == json.dumps((points, stats), sort_keys=True)


def test_a_prompt_past_the_window_is_refused_with_its_reason_and_the_diagnosis_goes_on(model_server, tmp_path,
                                                                                       real):
    failed = [t for t in real if not (t.get("outcome") or {}).get("success")][:2]
    llm = real_llm(model_server, tmp_path / "llm", max_tokens=8, context_window=256)
    points, stats = llm_diagnose(failed, llm, tmp_path / "cache")
    assert points == [] and stats["stopped"] is None and len(stats["errors"]) == len(failed)
    assert all("ContextExceeded" in e and "context window of 256 tokens (the llm.context_window setting)" in e
               for e in stats["errors"])
    assert llm.usage()["calls"] == 0, "nothing was sent"
    offline = LLM(llm.config.model_copy(update={"mode": "offline"}), tmp_path / "llm")
    assert llm_diagnose(failed, offline, tmp_path / "cache2")[1]["errors"] == stats["errors"]


# ------------------------------------------------------------------ injected: the server's own words

def test_the_window_is_read_from_a_vllm_style_models_list_and_the_reply_fitted_to_it(llm_server, tmp_path, canary):  # noqa: F811
    llm_server.models({"id": "gpt-4o", "max_model_len": 900}).script("fits")
    llm = make_llm(llm_server, tmp_path / "llm")
    reply = llm.complete(LONG, purpose="diagnose")
    prompt = estimate_prompt_tokens(LONG)
    sent = llm_server.requests[-1].body["max_tokens"]
    assert 16 <= sent == 900 - -(-prompt * SAFETY // 1) < 1024 and reply.text == "fits"
    assert read_json(tmp_path / "llm" / reply.record)["response"]["max_tokens_sent"] == sent
    assert read_json(record_path(tmp_path / "llm"))["source"].endswith("/models: max_model_len")
    llm_server.stop()   # offline: the window and the reply come from the record
    offline = make_llm(llm_server, tmp_path / "llm", mode="offline")
    assert offline.complete(LONG, purpose="diagnose").text == "fits" and offline.context_window()["context_window"] == 900


@pytest.mark.parametrize("entry, window", [({"id": "gpt-4o", "context_length": 4096}, 4096),                 # LM Studio, OpenRouter
                                           ({"id": "gpt-4o", "meta": {"n_ctx_train": 8192}}, 8192),          # llama.cpp
                                           ({"id": "gpt-4o", "owned_by": "transformers"}, None)])            # transformers serve, Ollama
def test_each_servers_way_of_saying_its_window_is_read(llm_server, tmp_path, canary, entry, window):  # noqa: F811
    llm_server.models(entry)
    assert make_llm(llm_server, tmp_path).context_window()["context_window"] == window


def test_a_prompt_past_the_servers_window_is_refused_before_sending_and_offline_alike(llm_server, tmp_path, canary):  # noqa: F811
    llm_server.models({"id": "gpt-4o", "max_model_len": 200})
    llm = make_llm(llm_server, tmp_path / "llm")
    with pytest.raises(ContextExceeded, match=r"leaves no room for a reply in the model's context window of 200") as live:
        llm.complete(LONG, purpose="agent:effectiveness")
    assert llm_server.requests == [], "nothing was sent"
    llm_server.stop()
    with pytest.raises(ContextExceeded) as offline:
        make_llm(llm_server, tmp_path / "llm", mode="offline").complete(LONG, purpose="agent:effectiveness")
    assert str(offline.value) == str(live.value)


@pytest.mark.parametrize("provider, body", [("openai", VLLM_400), ("openai", OPENAI_400), ("openai", LLAMACPP_400),
                                            ("anthropic", ANTHROPIC_400)])
def test_a_context_length_400_is_a_recorded_refusal_not_a_retry(llm_server, tmp_path, canary, provider, body):  # noqa: F811
    llm_server.garbage(body, status=400, content_type="application/json")
    llm = make_llm(llm_server, tmp_path / "llm", provider)
    with pytest.raises(ContextExceeded, match="does not fit the context window: HTTP 400") as live:
        llm.complete(CHAT, purpose="diagnose")
    assert len(llm_server.requests) == 1
    with pytest.raises(ContextExceeded) as offline:
        make_llm(llm_server, tmp_path / "llm", provider, mode="offline").complete(CHAT, purpose="diagnose")
    assert str(offline.value) == str(live.value)


def test_a_plain_400_is_not_taken_for_a_context_error(llm_server, tmp_path, canary):  # noqa: F811
    llm_server.fail(400, message="temperature must be at most 2")
    with pytest.raises(LLMUnavailable, match="refused the request"):
        make_llm(llm_server, tmp_path).complete(CHAT, purpose="diagnose")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_sdks_retries_are_recorded_with_their_reasons(llm_server, tmp_path, canary, provider):  # noqa: F811
    llm_server.fail(429, retry_after=0).fail(503).script("third time")
    llm = make_llm(llm_server, tmp_path / "llm", provider)
    reply = llm.complete(CHAT, purpose="propose")
    assert reply.text == "third time" and reply.retried == ("HTTP 429", "HTTP 503") and llm.usage()["retries"] == 2
    offline = make_llm(llm_server, tmp_path / "llm", provider, mode="offline")
    assert offline.complete(CHAT, purpose="propose").retried == reply.retried and offline.usage()["retries"] == 2


def test_a_stalled_answer_is_a_read_timeout_retried_and_recorded(llm_server, tmp_path, canary):  # noqa: F811
    llm_server.stall(3.0).script("after the stall")
    reply = make_llm(llm_server, tmp_path, timeout_s=0.5, max_retries=1).complete(CHAT, purpose="diagnose")
    assert reply.text == "after the stall" and reply.retried == ("no answer (timeout or lost connection)",)


def test_a_server_that_stalls_for_good_says_so_after_its_retries(llm_server, tmp_path, canary):  # noqa: F811
    llm_server.stall(3.0, times=2)
    with pytest.raises(LLMUnavailable, match=r"failed 2 times, last: no answer within 0.5 s \(after 1 retried"):
        make_llm(llm_server, tmp_path, timeout_s=0.5, max_retries=1).complete(CHAT, purpose="diagnose")


def test_the_diagnosis_prompt_cap_follows_the_window(llm_server, tmp_path, canary, real):  # noqa: F811
    failed = next(t for t in real if not (t.get("outcome") or {}).get("success"))
    llm_server.models({"id": "gpt-4o", "max_model_len": 2600})
    llm = make_llm(llm_server, tmp_path, max_tokens=100)
    room = llm.prompt_room(100)
    assert room == int((2600 - 100) / SAFETY) and count_tokens(render_prompt(failed, room)) <= room


def test_the_stage_table_says_unpriced_where_the_model_has_no_price(tmp_path):
    from evolver.store import RunStore
    from evolver.tables import stage_table

    store = RunStore(tmp_path)
    usage = {"calls": 2, "from_record": 0, "prompt_tokens": 90, "completion_tokens": 10, "usd": 0.0, "wall_s": 1.0}
    for stage, llm in (("diagnose", {**usage, "unpriced": True}), ("propose", {**usage, "usd": 0.0123})):
        store.journal.append(journal_event({"event": "stage_started", "epoch": 0, "stage": stage}))
        store.journal.append(journal_event({"event": "stage_done", "epoch": 0, "stage": stage, "result": {"llm": llm}}))
    assert [row[3:] for row in stage_table(store)] == [["2", "100", "unpriced"], ["2", "100", "0.0123"]]
