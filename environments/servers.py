"""Does an OpenAI-compatible server answer, and serve the model asked for? One question asked before
any expensive work (a run's code agent and diagnosis, a simulated user), and what a wrong endpoint
answers turned into one sentence: nothing listens, the key is refused, the path is no OpenAI API, the
model is not served. Asked through the `openai` SDK's `models.list` (GET {base_url}/models), which
vLLM, Ollama, llama.cpp, LM Studio and `transformers serve` all answer.
"""
from __future__ import annotations

from base.errors import UserError


def check_server(base_url: str, api_key: str, model: str, *, url_flag: str, model_flag: str,
                 key_env: str, start_hint: str = "start one or fix the URL") -> list[str]:
    """The models the server at `base_url` serves; UserError in one sentence unless it answers and
    serves `model` (a server that lists no models is taken at its word)."""
    import openai

    try:
        with openai.OpenAI(base_url=base_url, api_key=api_key, timeout=15.0, max_retries=0) as client:
            served = [m.id for m in client.models.list()]
    except openai.APIConnectionError:
        raise UserError(f"no server answers at {url_flag} {base_url}: {start_hint}") from None
    except openai.AuthenticationError:
        raise UserError(f"the server at {base_url} refused the key in ${key_env}: set that variable to a key it "
                        "accepts") from None
    except openai.NotFoundError:
        raise UserError(f"{base_url}/models is not found: the base URL of an OpenAI-compatible server usually "
                        "ends in /v1") from None
    except openai.APIError as exc:
        raise UserError(f"the server at {base_url} answered {type(exc).__name__}: {exc}") from None
    if served and model not in served:
        raise UserError(f"the server at {base_url} does not serve {model_flag} {model!r} "
                        f"(it serves: {', '.join(served[:8])})")
    return served
