"""LLM faults the provider did not plan: a body that is no completion is an LLMError (the run goes
on without that proposal), and a server that echoes a secret gets it scrubbed from every record."""
import json

import pytest
from llm_server import llm_server  # noqa: F401  (the fixture)

from evolver.llm import LLMUnavailable

from test_llm import CANARY, CHAT, canary, make_llm  # noqa: F401  (fixtures)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("body", [b"<html><body><h1>502 Bad Gateway</h1>\x1b[2J</body></html>",
                                  b'{"choices": [{"message": {"content": "trunc', b'{"choices": "no list"}',
                                  b'{"content": 42, "usage": "many"}', b"null"])
def test_a_body_that_is_no_completion_is_an_llm_error(llm_server, tmp_path, canary, provider, body):  # noqa: F811
    llm_server.garbage(body, content_type="text/html" if body.startswith(b"<") else "application/json")
    llm = make_llm(llm_server, tmp_path / "llm", provider)
    with pytest.raises(LLMUnavailable, match=r"answered with something that is not a chat completion|refused") as e:
        llm.complete(CHAT, purpose="propose")
    assert "\x1b" not in str(e.value) and len(str(e.value)) < 600
    assert not list((tmp_path / "llm").glob("*.json")) if (tmp_path / "llm").exists() else True
    llm_server.script("fine again")
    assert llm.complete(CHAT, purpose="propose").text == "fine again", "the next call is not affected"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_server_echoing_the_key_gets_it_scrubbed_from_the_record_and_the_reply(llm_server, tmp_path, canary,  # noqa: F811
                                                                                  monkeypatch, provider):
    monkeypatch.setenv("OTHER_SERVICE_TOKEN", "tok-other-secret-123")
    llm_server.script(lambda req: {"text": "your headers: " + json.dumps(req.headers) + " and tok-other-secret-123",
                                   "usage": (3, 4)})
    llm = make_llm(llm_server, tmp_path / "llm", provider)
    reply = llm.complete(CHAT, purpose="diagnose")
    assert CANARY in json.dumps(llm_server.requests[0].headers), "the server did see the key"
    assert CANARY not in reply.text and "[key]" in reply.text and "tok-other-secret-123" not in reply.text
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not any(CANARY.encode() in p.read_bytes() or b"tok-other" in p.read_bytes() for p in files)
    offline = make_llm(llm_server, tmp_path / "llm", provider, mode="offline").complete(CHAT, purpose="diagnose")
    assert offline.text == reply.text and offline.from_record
