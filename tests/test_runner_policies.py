"""Policy backends: local transformers (tiny model) and an OpenAI-compatible HTTP endpoint (a
scripted server on 127.0.0.1)."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from environments import runner
from environments.policies.openai_compat import TOOL_RESULT_PREFIX, OpenAIPolicy, chat_messages
from base.errors import UserError
from chat_format import chat_format as cf

from test_runner import TOOLS, CounterBenchmark

CONVERSATION = [
    {"role": "user", "content": "add 3 please"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "add", "arguments": '{"n":3}'}}]},
    {"role": "tool", "tool_call_id": "c0", "content": "3"},
]


# ---------------------------------------------------------------------------------------------
# the scripted OpenAI-compatible server


def _reply_for(prompt_text: str) -> str:
    """Answer like a model that has learnt the counter task: call add(n) after a user turn."""
    head = prompt_text.rsplit(cf.IM_START, 2)[-2] if prompt_text.endswith(cf.GENERATION_PROMPT) else prompt_text
    if head.startswith("user") or head.startswith("user\n"):
        n = int(head.split("add ")[1].split(cf.IM_END)[0].split()[0])
        return cf.render_tool_call({"name": "add", "arguments": {"n": n}}) + cf.IM_END + "ignored"
    return "Added."


class Server:
    def __init__(self, fail=False):
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                if fail:
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "boom"}}')
                    return
                n = body.get("n", 1)
                if self.path.endswith("/chat/completions"):
                    last = body["messages"][-1]
                    role = "tool" if last["content"].startswith(TOOL_RESULT_PREFIX) else last["role"]
                    text = _reply_for(cf.IM_START + role + "\n" + last["content"] + cf.IM_END + "\n"
                                      + cf.GENERATION_PROMPT)
                    choices = [{"index": i, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": f"{text}"}} for i in reversed(range(n))]
                    obj = "chat.completion"
                else:
                    text = _reply_for(body["prompt"])
                    choices = [{"index": i, "text": text if i == 0 else f"sample {i}", "finish_reason": "stop",
                                "logprobs": None} for i in reversed(range(n))]
                    obj = "text_completion"
                data = json.dumps({"id": "x", "object": obj, "created": 0, "model": body["model"], "choices": choices,
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_completions_endpoint_gets_the_chat_format_text(monkeypatch):
    monkeypatch.setenv("TEST_ENDPOINT_KEY", "secret-key")
    with Server() as server:
        policy = OpenAIPolicy(server.url, "served-model", api_key_env="TEST_ENDPOINT_KEY", max_new_tokens=32,
                              concurrency=1)  # requests in prompt order (the runner test runs them concurrently)
        out = policy.generate([(CONVERSATION[:1], TOOLS), (CONVERSATION, TOOLS)])
        sampled = policy.generate([(CONVERSATION[:1], TOOLS)], n=3, temperature=0.7, seed=11)
    first = server.requests[0]
    assert first["path"] == "/v1/completions" and first["auth"] == "Bearer secret-key"
    assert first["body"]["prompt"] == cf.render_prompt(CONVERSATION[:1], TOOLS)
    assert first["body"]["stop"] == [cf.STOP] and first["body"]["max_tokens"] == 32
    assert first["body"]["temperature"] == 0 and "seed" not in first["body"]
    assert out == [[cf.render_tool_call({"name": "add", "arguments": {"n": 3}})], ["Added."]]
    assert server.requests[2]["body"]["n"] == 3 and server.requests[2]["body"]["seed"] == 11
    assert sampled[0][1:] == ["sample 1", "sample 2"]            # choices in index order
    assert "secret-key" not in json.dumps(policy.describe())
    assert policy.describe()["api_key_env"] == "TEST_ENDPOINT_KEY"


def test_chat_endpoint_gets_chat_format_pieces():
    with Server() as server:
        policy = OpenAIPolicy(server.url, "m", api="chat", concurrency=1)
        policy.generate([(CONVERSATION, TOOLS)])
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert body["messages"] == chat_messages(CONVERSATION, TOOLS)
    assert body["messages"][0]["content"] == cf.DEFAULT_SYSTEM + "\n\n" + cf.render_tools(TOOLS)
    assert body["messages"][2]["content"] == cf.render_assistant(cf.normalize_messages(CONVERSATION)[1])
    assert body["messages"][3] == {"role": "user", "content": TOOL_RESULT_PREFIX + "3"}


def test_runner_drives_an_http_policy_end_to_end():
    bench = CounterBenchmark(n_tasks=3)
    with Server() as server:
        records = runner.run_episodes(bench, bench.tasks("dev"), OpenAIPolicy(server.url, "m"), batch_size=2)
    assert all(r["outcome"]["success"] for r in records)
    assert len(server.requests) == 12


def test_endpoint_errors_are_one_line_user_errors():
    with Server(fail=True) as server:
        policy = OpenAIPolicy(server.url, "m", max_retries=0)
        with pytest.raises(UserError, match="endpoint .* failed: InternalServerError"):
            policy.generate([(CONVERSATION[:1], TOOLS)])
    with pytest.raises(UserError, match="not an http"):
        OpenAIPolicy("ftp://x", "m")


# ---------------------------------------------------------------------------------------------
# local transformers


@pytest.fixture(scope="module")
def tiny():
    from environments.policies.local import TransformersPolicy

    return TransformersPolicy("tiny-random", threads=2, batch_size=2, max_new_tokens=6)


def test_local_greedy_is_deterministic_and_batched(tiny):
    prompts = [(CONVERSATION[:1], TOOLS), (CONVERSATION, TOOLS), ([{"role": "user", "content": "hi"}], [])]
    before = tiny.stats["batches"]
    a = tiny.generate(prompts)
    assert tiny.stats["batches"] - before == 2                   # 3 prompts, batches of 2
    assert tiny.generate(prompts) == a and all(len(x) == 1 and isinstance(x[0], str) for x in a)
    alone = tiny.generate(prompts[2:])
    assert len(alone) == 1
    # answers come back in call order though the prompts are decoded shortest first
    assert tiny.generate(prompts[::-1]) == a[::-1]
    d = tiny.describe()
    assert d["threads"] == 2 and d["padding"] == "left" and d["device"] == "cpu" and d["adapter"] is None


def test_local_sampling_is_seeded(tiny):
    prompts = [(CONVERSATION[:1], TOOLS), (CONVERSATION, TOOLS)]
    a = tiny.generate(prompts, n=3, temperature=1.0, seed=5)
    assert [len(x) for x in a] == [3, 3]
    assert tiny.generate(prompts, n=3, temperature=1.0, seed=5) == a
    assert tiny.generate(prompts, n=3, temperature=1.0, seed=6) != a
    with pytest.raises(ValueError, match="positive temperature"):
        tiny.generate(prompts, n=2)


def test_local_prompt_that_cannot_fit_gets_an_empty_answer(tiny):
    tiny.max_prompt_tokens, saved = 5, tiny.max_prompt_tokens
    try:
        before = tiny.stats["prompts_too_long"]
        assert tiny.generate([(CONVERSATION, TOOLS)]) == [[""]]
        assert tiny.stats["prompts_too_long"] == before + 1
    finally:
        tiny.max_prompt_tokens = saved


def test_local_base_plus_lora_adapter(tmp_path):
    from peft import LoraConfig, get_peft_model

    from environments.policies.local import TransformersPolicy
    from trainer.models import load_policy

    model, _ = load_policy("tiny-random")
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")
    merged = TransformersPolicy("tiny-random", str(tmp_path / "adapter"), threads=2, max_new_tokens=8)
    unmerged = TransformersPolicy("tiny-random", str(tmp_path / "adapter"), threads=2, max_new_tokens=8, merge=False)
    assert type(unmerged.model).__name__.startswith("PeftModel") and not unmerged.describe()["adapter_merged"]
    assert type(merged.model).__name__ == "LlamaForCausalLM" and merged.describe()["adapter_merged"]
    assert merged.describe()["adapter"] == str(tmp_path / "adapter")
    prompts = [(CONVERSATION[:1], TOOLS), (CONVERSATION, TOOLS), ([{"role": "user", "content": "hi"}], [])]
    # the merged weights W + BA decode as the adapter does (the LoRA changes what the base says)
    assert merged.generate(prompts) == unmerged.generate(prompts)
    assert merged.generate(prompts) != TransformersPolicy("tiny-random", threads=2, max_new_tokens=8).generate(prompts)
