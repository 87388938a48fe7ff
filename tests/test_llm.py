"""evolver/llm.py through real HTTP: a scripted server speaks the OpenAI and Anthropic APIs."""
import json
import logging
import traceback

import anthropic
import openai
import pytest
from llm_server import llm_server  # noqa: F401  (the fixture)

from base.errors import RunFailed, UserError
from base.files import read_json
from evolver.llm import (LLM, BudgetExceeded, LLMConfig, LLMError, LLMUnavailable, count_tokens, estimate_prompt_tokens,
                         cost_function, load_pricing, price_of)

CANARY = "sk-canary-xyz"
SYSTEM = {"role": "system", "content": "You diagnose why a tool-calling agent failed."}
USER = {"role": "user", "content": "Which argument of get_weather was wrong?"}
CHAT = [SYSTEM, USER]
MODELS = {"openai": "gpt-4o", "anthropic": "claude-sonnet-4-6"}


@pytest.fixture
def canary(monkeypatch):
    monkeypatch.setenv("CANARY_KEY", CANARY)
    return CANARY


def make_llm(server, record_dir, provider="openai", **options):
    """An LLM on the scripted server."""
    config = {"provider": provider, "model": MODELS[provider], "api_key_env": "CANARY_KEY",
              "base_url": server.openai_url if provider == "openai" else server.anthropic_url, **options}
    return LLM(LLMConfig.from_mapping(config), record_dir)


def waits(server) -> list[float]:
    """Seconds between consecutive requests (the SDK's backoff, plus a little)."""
    at = [r.at for r in server.requests]
    return [b - a for a, b in zip(at, at[1:])]


def retry_counts(server) -> list[str]:
    """What the SDK says each request is (its own retry counter header)."""
    return [r.headers.get("x-stainless-retry-count") for r in server.requests]


def no_client(*args, **kwargs):
    raise AssertionError("a network client was constructed")


def spent(usage):
    """The reproducible part of usage(): calls and tokens and USD, in total and by purpose."""
    keys = ("calls", "prompt_tokens", "completion_tokens", "usd")
    return ({k: usage[k] for k in keys}, {p: {k: u[k] for k in keys} for p, u in usage["by_purpose"].items()})


def test_openai_round_trip_reports_the_servers_usage(llm_server, tmp_path, canary):
    llm_server.script({"text": "The date argument.", "usage": (120, 7)})
    llm = make_llm(llm_server, tmp_path)
    reply = llm.complete(CHAT, purpose="diagnose")

    assert (reply.text, reply.prompt_tokens, reply.completion_tokens, reply.from_record) == ("The date argument.", 120, 7, False)
    assert reply.usd == pytest.approx((120 * 2.5 + 7 * 10.0) / 1e6)   # gpt-4o's list price
    sent = llm_server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.body == {"model": "gpt-4o", "messages": CHAT, "max_tokens": 1024, "temperature": 0.0}
    record = read_json(tmp_path / reply.record)
    assert record["request"]["messages"] == CHAT and record["request"]["base_url"] == llm_server.openai_url
    assert record["response"]["raw_usage"] == {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}
    usage = llm.usage()
    assert spent(usage) == ({"calls": 1, "prompt_tokens": 120, "completion_tokens": 7, "usd": round(reply.usd, 8)},
                            {"diagnose": {"calls": 1, "prompt_tokens": 120, "completion_tokens": 7,
                                          "usd": round(reply.usd, 8)}})
    assert usage["from_record"] == 0 and usage["unpriced"] is False


def test_anthropic_round_trip_lifts_the_system_messages(llm_server, tmp_path, canary):
    llm_server.script({"text": "The date argument.", "usage": (50, 5)})
    llm = make_llm(llm_server, tmp_path, provider="anthropic")
    brief = {"role": "system", "content": "Be brief."}
    reply = llm.complete([SYSTEM, brief, USER], purpose="diagnose", max_tokens=300)

    assert (reply.text, reply.prompt_tokens, reply.completion_tokens) == ("The date argument.", 50, 5)
    assert reply.usd == pytest.approx((50 * 3.0 + 5 * 15.0) / 1e6)
    sent = llm_server.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.body["system"] == f"{SYSTEM['content']}\n\nBe brief."
    assert sent.body["messages"] == [USER] and sent.body["max_tokens"] == 300
    assert "temperature" not in sent.body   # API 2026-10-21 refuses sampling parameters


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_calls_own_temperature_and_seed_are_part_of_its_request_and_record(llm_server, tmp_path, canary, provider):
    """The code agent's k candidates sample apart: a call may ask for its own temperature and seed;
    both key its record (so an offline run finds it), and an OpenAI-compatible server receives both."""
    llm_server.script("plain", "sampled", "sampled again")
    llm = make_llm(llm_server, tmp_path, provider)
    plain = llm.complete(CHAT, purpose="agent")
    sampled = llm.complete(CHAT, purpose="agent", temperature=0.7, seed=1)
    again = llm.complete(CHAT, purpose="agent", temperature=0.7, seed=2)
    assert len({plain.record, sampled.record, again.record}) == 3
    request = read_json(tmp_path / sampled.record)["request"]
    assert (request["temperature"], request["seed"]) == (0.7, 1) and "seed" not in read_json(tmp_path / plain.record)["request"]
    bodies = [r.body for r in llm_server.requests]
    if provider == "openai":
        assert [(b["temperature"], b.get("seed")) for b in bodies] == [(0.0, None), (0.7, 1), (0.7, 2)]
    else:   # the Anthropic API takes no sampling parameter: it samples as it does by default
        assert not any("temperature" in b or "seed" in b for b in bodies)
    offline = make_llm(llm_server, tmp_path, provider, mode="offline")
    assert offline.complete(CHAT, purpose="agent", temperature=0.7, seed=1).text == "sampled"
    with pytest.raises(LLMUnavailable, match="not in the record"):
        offline.complete(CHAT, purpose="agent", temperature=0.7, seed=3)
    with pytest.raises(ValueError, match="temperature"):
        llm.complete(CHAT, purpose="agent", temperature=3.0)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_tiktoken_counts_when_the_server_reports_no_usage(llm_server, tmp_path, canary, provider):
    llm_server.script({"text": "The date argument is in the wrong format.", "usage": None})
    reply = make_llm(llm_server, tmp_path, provider).complete(CHAT, purpose="diagnose")
    assert reply.prompt_tokens == estimate_prompt_tokens(CHAT) > 0
    assert reply.completion_tokens == count_tokens("The date argument is in the wrong format.") == 9
    assert read_json(tmp_path / reply.record)["response"]["raw_usage"] is None


def test_openai_reasoning_models_get_max_completion_tokens_and_no_temperature(llm_server, tmp_path, canary):
    llm_server.script("ok")
    make_llm(llm_server, tmp_path, model="o4-mini").complete([USER], purpose="diagnose", max_tokens=100)
    assert llm_server.requests[0].body == {"model": "o4-mini", "messages": [USER], "max_completion_tokens": 100}


def test_an_offline_run_reproduces_replies_and_usage_without_the_network(llm_server, tmp_path, canary,
                                                                            monkeypatch):
    llm_server.script({"text": "first", "usage": (40, 3)}, "second", {"text": "third", "usage": None})
    recorded = make_llm(llm_server, tmp_path)
    originals = [recorded.complete(CHAT, purpose="diagnose"), recorded.complete([USER], purpose="agent:memory"),
                 recorded.complete(CHAT, purpose="diagnose")]
    llm_server.stop()
    served = len(llm_server.requests)
    monkeypatch.delenv("CANARY_KEY")
    monkeypatch.setattr(openai, "OpenAI", no_client)

    offline = make_llm(llm_server, tmp_path, mode="offline")
    replies = [offline.complete(CHAT, purpose="diagnose"), offline.complete([USER], purpose="agent:memory"),
               offline.complete(CHAT, purpose="diagnose")]

    assert [r.text for r in replies] == ["first", "second", "third"]
    assert all(r.from_record for r in replies) and not any(r.from_record for r in originals)
    assert [(r.record, r.prompt_tokens, r.completion_tokens, r.usd) for r in replies] == \
        [(r.record, r.prompt_tokens, r.completion_tokens, r.usd) for r in originals]
    assert spent(offline.usage()) == spent(recorded.usage())
    assert offline.usage()["from_record"] == 3 and len(llm_server.requests) == served == 3


def test_an_offline_miss_raises_llm_unavailable(tmp_path, monkeypatch):
    monkeypatch.setattr(openai, "OpenAI", no_client)
    llm = LLM(LLMConfig("openai", "gpt-4o", base_url="http://127.0.0.1:9/v1", mode="offline"), tmp_path)
    with pytest.raises(LLMUnavailable, match=r"not in the record \(offline run\)"):
        llm.complete(CHAT, purpose="diagnose")


def test_the_old_spelling_replay_of_the_offline_mode_still_reads_as_offline():
    # a run.json or config file written before the rename ("replay" now means re-executing a curation)
    assert LLMConfig("openai", "gpt-4o", mode="replay").mode == "offline"
    assert LLMConfig.from_mapping({"provider": "openai", "model": "gpt-4o", "mode": "replay"}).mode == "offline"


def test_identical_requests_get_numbered_records(llm_server, tmp_path, canary):
    llm_server.script("one", "two")
    llm = make_llm(llm_server, tmp_path)
    first, second = llm.complete(CHAT, purpose="diagnose"), llm.complete(CHAT, purpose="diagnose")
    assert (first.text, second.text) == ("one", "two")
    assert first.record.endswith("-0.json") and second.record == first.record[:-len("-0.json")] + "-1.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.record, second.record])


def test_record_mode_reuses_a_record_and_live_mode_calls_again(llm_server, tmp_path, canary):
    llm_server.script("recorded", "fresh")
    first = make_llm(llm_server, tmp_path).complete(CHAT, purpose="diagnose")
    again = make_llm(llm_server, tmp_path).complete(CHAT, purpose="diagnose")
    assert (again.text, again.from_record, len(llm_server.requests)) == ("recorded", True, 1)

    live = make_llm(llm_server, tmp_path, mode="live").complete(CHAT, purpose="diagnose")
    assert (live.text, live.from_record, live.record, len(llm_server.requests)) == ("fresh", False, first.record, 2)
    assert read_json(tmp_path / live.record)["response"]["text"] == "fresh"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_429_is_retried_by_the_sdk_after_its_retry_after(llm_server, tmp_path, canary, provider):
    llm_server.fail(429, times=2, retry_after=1.5).script("ok")
    llm = make_llm(llm_server, tmp_path, provider)
    assert llm.complete(CHAT, purpose="diagnose").text == "ok"
    assert retry_counts(llm_server) == ["0", "1", "2"]
    assert all(w >= 1.5 for w in waits(llm_server))  # the SDK's own backoff would be 0.4-1 s


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_5xx_is_retried_with_growing_backoff(llm_server, tmp_path, canary, provider):
    llm_server.fail(500).fail(503).script("ok")
    llm = make_llm(llm_server, tmp_path, provider)
    assert llm.complete(CHAT, purpose="diagnose").text == "ok"
    first, second = waits(llm_server)
    assert retry_counts(llm_server) == ["0", "1", "2"] and 0.3 <= first < second


def test_exhausted_retries_raise_llm_unavailable(llm_server, tmp_path, canary):
    llm_server.fail(503, times=10, message="overloaded").script("never")
    llm = make_llm(llm_server, tmp_path, max_retries=2)
    with pytest.raises(LLMUnavailable, match="failed 3 times, last: HTTP 503: overloaded") as e:
        llm.complete(CHAT, purpose="diagnose")
    assert isinstance(e.value, RunFailed) and retry_counts(llm_server) == ["0", "1", "2"]
    assert list(tmp_path.iterdir()) == [] and llm.usage()["calls"] == 0


def test_a_timeout_is_retried(llm_server, tmp_path, canary):
    llm_server.stall(5).script("ok")
    llm = make_llm(llm_server, tmp_path, timeout_s=0.3)
    assert llm.complete(CHAT, purpose="diagnose").text == "ok"
    assert retry_counts(llm_server) == ["0", "1"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_400_is_not_retried(llm_server, tmp_path, canary, provider):
    llm_server.fail(400, message="model gpt-9 does not exist").script("never")
    llm = make_llm(llm_server, tmp_path, provider)
    with pytest.raises(LLMUnavailable, match="refused the request: HTTP 400: model gpt-9 does not exist"):
        llm.complete(CHAT, purpose="diagnose")
    assert retry_counts(llm_server) == ["0"]


def test_the_token_budget_stops_the_call_that_would_pass_it(llm_server, tmp_path, canary):
    llm_server.script({"text": "a", "usage": (50, 5)}, "never")
    llm = make_llm(llm_server, tmp_path, budget_tokens=60)
    llm.complete(CHAT, purpose="diagnose")
    assert llm.remaining() == {"tokens": 5, "usd": None}
    with pytest.raises(BudgetExceeded, match="token budget of 60 is spent") as e:
        llm.complete([USER], purpose="diagnose")
    assert isinstance(e.value, LLMError) and len(llm_server.requests) == 1


def test_the_usd_budget_stops_calls_but_recorded_replies_are_free(llm_server, tmp_path, canary):
    pricing = tmp_path / "pricing.json"
    pricing.write_text(json.dumps({"gpt-4o": {"input": 1000.0, "output": 1000.0}}))
    llm_server.script({"text": "a", "usage": (10, 10)}, "never")
    options = {"budget_usd": 0.02, "pricing_file": str(pricing)}
    llm = make_llm(llm_server, tmp_path / "llm", **options)
    assert llm.complete(CHAT, purpose="diagnose").usd == pytest.approx(0.02)
    assert llm.remaining() == {"tokens": None, "usd": 0.0}
    with pytest.raises(BudgetExceeded, match="0.02 USD is spent"):
        llm.complete([USER], purpose="diagnose")

    resumed = make_llm(llm_server, tmp_path / "llm", **options)
    assert resumed.complete(CHAT, purpose="diagnose").from_record   # a recorded reply needs no budget …
    with pytest.raises(BudgetExceeded):                          # … but it was paid for by this run
        resumed.complete([USER], purpose="diagnose")
    assert len(llm_server.requests) == 1


def test_the_pricing_file_prices_models_over_the_genai_prices_catalog(llm_server, tmp_path, canary):
    pricing = tmp_path / "pricing.json"
    pricing.write_text(json.dumps({"gpt-4o": {"input": 1.0, "output": 2.0}, "qwen3-8b": {"input": 0.1, "output": 0.2}}))
    table = load_pricing(str(pricing))
    assert price_of(table, "gpt-4o-2024-08-06") == {"input": 1.0, "output": 2.0}  # a dated id takes its base's
    assert price_of(table, "gpt-4o-mini") is None   # no guessing from a prefix
    config = LLMConfig.from_mapping({"provider": "openai", "model": "gpt-4o", "pricing_file": str(pricing)})
    assert cost_function(config)(1_000_000, 1_000_000) == pytest.approx(3.0)
    # the catalog, per call size: list prices of a dated id and a model with long-context tiers
    for model, provider, usage, usd in [("claude-haiku-4-5-20251001", "anthropic", (1000, 100), 1e-3 + 5e-4),
                                        ("gpt-5.4-mini-2026-03-17", "openai", (1000, 100), 7.5e-4 + 4.5e-4),
                                        ("gpt-5.4", "openai", (10_000, 1000), 0.025 + 0.015),
                                        ("gpt-5.4", "openai", (1_000_000, 0), 5.0)]:  # past 272k: doubled
        assert cost_function(LLMConfig.from_mapping({"provider": provider, "model": model}))(*usage) == \
            pytest.approx(usd), model

    llm_server.script({"text": "a", "usage": (1_000_000, 1_000_000)})
    reply = make_llm(llm_server, tmp_path / "llm", model="qwen3-8b", pricing_file=str(pricing)).complete(
        CHAT, purpose="diagnose")
    assert reply.usd == pytest.approx(0.3)


def test_an_unknown_model_costs_nothing_and_is_flagged_unpriced(llm_server, tmp_path, canary):
    llm_server.script({"text": "a", "usage": (100, 10)})
    llm = make_llm(llm_server, tmp_path, model="llama-3.2-3b-instruct")
    assert llm.complete(CHAT, purpose="diagnose").usd == 0.0 and llm.usage()["unpriced"] is True
    with pytest.raises(UserError, match="no price"):
        make_llm(llm_server, tmp_path, model="llama-3.2-3b-instruct", budget_usd=1.0)


def test_a_bad_pricing_file_is_a_user_error(llm_server, tmp_path):
    bad = tmp_path / "pricing.json"
    bad.write_text(json.dumps({"gpt-4o": {"input": "cheap"}}))
    with pytest.raises(UserError, match="pricing_file"):
        make_llm(llm_server, tmp_path, pricing_file=str(bad))
    with pytest.raises(UserError, match="cannot read"):
        make_llm(llm_server, tmp_path, pricing_file=str(tmp_path / "missing.json"))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_api_key_is_sent_but_never_written(llm_server, tmp_path, canary, caplog, provider):
    caplog.set_level(logging.DEBUG)
    llm_server.script("fine")
    llm = make_llm(llm_server, tmp_path / "llm", provider)
    llm.complete(CHAT, purpose="diagnose")
    llm_server.fail(401, message=f"Incorrect API key provided: {CANARY}")
    with pytest.raises(LLMUnavailable, match=r"HTTP 401: Incorrect API key provided: \[key\]") as e:
        llm.complete([USER], purpose="diagnose")

    headers = llm_server.requests[0].headers
    assert headers.get("authorization") == f"Bearer {CANARY}" or headers.get("x-api-key") == CANARY
    assert CANARY not in "".join(traceback.format_exception(e.value))
    assert llm.config.describe()["api_key_env"] == "CANARY_KEY" and CANARY not in json.dumps(llm.config.describe())
    assert CANARY not in json.dumps(llm.usage()) and CANARY not in caplog.text
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not any(CANARY.encode() in p.read_bytes() for p in files)


def test_a_missing_key_is_a_user_error_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(openai, "OpenAI", no_client)
    with pytest.raises(UserError, match="OPENAI_API_KEY is not set"):
        LLM(LLMConfig("openai", "gpt-4o"), tmp_path).complete(CHAT, purpose="diagnose")
    monkeypatch.delenv("MY_CLAUDE_KEY", raising=False)
    monkeypatch.setattr(anthropic, "Anthropic", no_client)
    with pytest.raises(UserError, match="MY_CLAUDE_KEY is not set"):
        LLM(LLMConfig("anthropic", "claude-haiku-4-5", api_key_env="MY_CLAUDE_KEY"), tmp_path).complete(
            CHAT, purpose="diagnose")
    assert list(tmp_path.iterdir()) == []


def test_a_local_server_needs_no_key(llm_server, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm_server.script("ok")
    LLM(LLMConfig("openai", "qwen3-8b", base_url=llm_server.openai_url), tmp_path).complete(CHAT, purpose="diagnose")
    assert llm_server.requests[0].headers["authorization"] == "Bearer not-needed"


@pytest.mark.parametrize("options, says", [
    ({"temprature": 0.2}, "unknown option(s) temprature"),
    ({"api_key": CANARY}, "api_key is not accepted"),
    ({"api_key_env": CANARY}, "the NAME of an environment variable"),
    ({"provider": "cohere"}, "provider must be one of openai, anthropic"),
    ({"model": ""}, "model must be a non-empty string"),
    ({"mode": "sometimes"}, "mode must be one of live, record, offline, replay"),
    ({"max_tokens": 0}, "max_tokens (--llm-max-tokens) must be at least 1, not 0"),
    ({"temperature": True}, "temperature must be a number"),
    ({"budget_usd": -1}, "budget_usd must be a finite number > 0, not -1"),
    ({"base_url": "localhost:8000"}, "base_url must be an http"),
])
def test_from_mapping_rejects_unknown_keys_and_bad_values(options, says):
    with pytest.raises(UserError) as e:
        LLMConfig.from_mapping({"provider": "openai", "model": "gpt-4o", **options})
    assert says in str(e.value) and CANARY not in str(e.value)
    with pytest.raises(UserError, match="model must be given"):
        LLMConfig.from_mapping({"provider": "openai"})


def test_describe_feeds_back_into_from_mapping():
    config = LLMConfig.from_mapping({"provider": "anthropic", "model": "claude-haiku-4-5", "budget_tokens": 10_000})
    described = config.describe()
    assert described["api_key_env"] == "ANTHROPIC_API_KEY" and json.loads(json.dumps(described)) == described
    assert LLMConfig.from_mapping(described) == LLMConfig("anthropic", "claude-haiku-4-5", api_key_env="ANTHROPIC_API_KEY",
                                                          budget_tokens=10_000)
