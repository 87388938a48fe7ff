"""Checks before epoch 0: what would otherwise fail after an hour of training fails now, in one
sentence naming the fix (names are checked by RunConfig; these need the machine)."""
from __future__ import annotations

import os
from pathlib import Path

from evolver.config import RunConfig
from base.errors import UserError

PROBE = [{"role": "user", "content": "Reply with the single word OK."}]


def check_base_model(base: str) -> None:
    """The base model's tokenizer loads here (a hub id needs a network or a local copy)."""
    from trainer import models

    models.check_name(base)
    try:
        if base in models.NAMES:
            models.load_tokenizer(str(models.embedded_tokenizer_dir()))
        else:
            models.load_tokenizer(models.resolve(base))
    except UserError:
        raise
    except Exception as exc:   # transformers raises OSError/ValueError/HTTP errors for what it cannot find
        reason = " ".join(str(exc).split())[:200]
        raise UserError(f"the tokenizer of base model {base!r} does not load here ({reason}); give a local model "
                        "directory or a model this machine has in its cache") from None


def check_llm(config: RunConfig, records: Path) -> dict | None:
    """The key variable is set and the endpoint answers one short request (recorded under
    `records`, like every request of the run); returns its usage, or None without an LLM."""
    if config.llm is None:
        return None
    from evolver.llm import LLM, LLMError

    llm_config = config.llm
    if llm_config.mode != "offline" and not os.environ.get(llm_config.key_env):
        if llm_config.base_url is None:   # a local server may need no key
            raise UserError(f"the LLM {llm_config.model} needs its API key in ${llm_config.key_env}, which is not set; "
                            "export it, or name the variable that holds it with --api-key-env")
    try:
        reply = LLM(llm_config, records).complete(PROBE, purpose="preflight", max_tokens=8)
    except LLMError as exc:
        if llm_config.provider == "openai" and llm_config.base_url:   # why, in one sentence, where the server says
            from environments.servers import check_server
            from evolver.llm import NO_KEY

            check_server(llm_config.base_url, os.environ.get(llm_config.key_env) or NO_KEY, llm_config.model,
                         url_flag="--base-url", model_flag="--model", key_env=llm_config.key_env,
                         start_hint="start one (`curateevo serve` serves the embedded model here) or fix the URL; "
                                    "nothing was run")
        where = llm_config.base_url or f"the {llm_config.provider} API"
        raise UserError(f"the LLM {llm_config.model} at {where} did not answer a one-line request: "
                        f"{' '.join(str(exc).split())[:240]}; nothing was run") from None
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens, "from_record": reply.from_record}
