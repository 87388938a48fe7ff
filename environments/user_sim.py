"""The LLM that plays the user in a user-simulated benchmark (τ² airline and retail, ACEBench's agent
multi-turn items): any OpenAI-compatible chat-completions server the user names — vLLM, Ollama,
llama.cpp, LM Studio, a hosted API, or `curateevo serve` on this machine (trainer/serve.py).

`UserEndpoint(model, base_url, api_key_env)` is what `--user-model MODEL --user-base-url URL`
(`--user-api-key-env NAME`) give. The key is read from that environment variable when a call is
made and goes nowhere else: `record()` (what trajectories, metrics and journals keep) holds the
model and URL only. `check()` asks the server for its models once, before any episode runs, and
turns what a wrong endpoint answers into one sentence (nothing listens, the key is refused, the
path is not an OpenAI API, the model is not served).

The user's replies are decoded greedily (temperature 0, a fixed seed where the server honours one)
and are part of each trajectory, so scoring them again never asks the server.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from base.errors import UserError

FLAGS = "--user-model MODEL --user-base-url URL"
"""The flags that name the user's endpoint (`eval`, `test`, `bench quality`)."""
DEFAULT_KEY_ENV = "CURATEEVO_USER_API_KEY"
NO_KEY = "EMPTY"
"""Sent as the key when the variable is unset: local servers ignore it, OpenAI's SDK needs one."""
SEED = 0
TIMEOUT_S = 120.0
USER_ERROR = "###USER-ERROR###"
"""Starts the closing message that stands for a user call that failed (the episode ended there)."""


@dataclass(frozen=True)
class UserEndpoint:
    model: str
    base_url: str
    api_key_env: str = DEFAULT_KEY_ENV
    max_tokens: int = 256
    """Tokens per user message at most (a user's line is short; a weak model may never stop)."""

    def __post_init__(self) -> None:
        if not self.model or not self.base_url:
            raise UserError(f"a simulated user needs both {FLAGS}")
        if not self.base_url.startswith(("http://", "https://")):
            raise UserError(f"--user-base-url {self.base_url!r} is not an http(s) URL "
                            "(e.g. http://localhost:8000/v1)")

    @property
    def api_key(self) -> str:
        return os.environ.get(self.api_key_env) or NO_KEY

    def record(self) -> dict:
        """What is kept of the endpoint (never the key)."""
        return {"model": self.model, "base_url": self.base_url, "max_tokens": self.max_tokens}

    def client(self):
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=TIMEOUT_S, max_retries=3)

    def litellm_args(self) -> dict:
        """`llm_args` for a litellm caller (τ²'s user simulator): this server as an OpenAI one, greedy."""
        return {"api_base": self.base_url, "api_key": self.api_key, "temperature": 0.0, "seed": SEED,
                "max_tokens": self.max_tokens, "timeout": TIMEOUT_S, "num_retries": 3}

    @property
    def litellm_model(self) -> str:
        return f"openai/{self.model}"

    def check(self) -> None:
        """Raise UserError in one sentence unless the server answers and serves `model`."""
        from environments.servers import check_server

        check_server(self.base_url, self.api_key, self.model, url_flag="--user-base-url", model_flag="--user-model",
                     key_env=self.api_key_env, start_hint="start one (`curateevo serve` serves the embedded model) "
                                                          "or fix the URL")


def failed(exc: BaseException) -> list[dict]:
    """The closing of an episode whose user call failed: one user message with the reason."""
    return [{"role": "user", "content": f"{USER_ERROR} {type(exc).__name__}: {exc}"[:2000]}]


def user_error(messages: Sequence[Mapping]) -> str | None:
    """Why the simulated user failed, when a trajectory ends on a `failed` closing; else None."""
    last = messages[-1] if messages else None
    if isinstance(last, Mapping) and last.get("role") == "user" and str(last.get("content", "")).startswith(USER_ERROR):
        return str(last["content"])[len(USER_ERROR):].strip()
    return None


def endpoint(model: str | None, base_url: str | None, api_key_env: str | None = None,
             max_tokens: int | None = None) -> UserEndpoint | None:
    """The endpoint the flags name, None when neither is given; UserError when only one is."""
    if not model and not base_url:
        return None
    return UserEndpoint(model or "", base_url or "", api_key_env or DEFAULT_KEY_ENV,
                        max_tokens or UserEndpoint.max_tokens)


def add_flags(parser) -> None:
    """`--user-model`, `--user-base-url`, `--user-api-key-env`, `--user-max-tokens` (eval, test, bench quality)."""
    g = parser.add_argument_group("simulated user (τ² airline/retail, ACEBench agent multi-turn)")
    g.add_argument("--user-model", default=None, help="the model an OpenAI-compatible server serves for the user side")
    g.add_argument("--user-base-url", default=None, help="that server's base URL, e.g. http://localhost:8000/v1 "
                                                         "(`curateevo serve` starts one over the embedded model)")
    g.add_argument("--user-api-key-env", default=None,
                   help=f"the environment variable holding its key (default {DEFAULT_KEY_ENV}; unset: none sent)")
    g.add_argument("--user-max-tokens", type=int, default=None, help="tokens per user message at most (default 256)")


def from_args(args) -> UserEndpoint | None:
    """The endpoint `add_flags`'s flags name, checked against the server (one sentence if it is wrong)."""
    user = endpoint(args.user_model, args.user_base_url, args.user_api_key_env, args.user_max_tokens)
    if user is not None:
        user.check()
    return user
