"""The GPU paths, tested on a CPU for their wiring: the device/precision rule, the launcher
command, vLLM options reaching TRL's config, evaluation through an OpenAI-compatible server,
Qwen3-4B's architecture from its config, and the throughput benchmark on a tiny model."""
import json
import sys
import time

import pytest

from bench.throughput import measure, sample_records
from evolver.cli import main
from base.errors import UserError
from llm_server import LLMServer
from trainer import models
from trainer.devices import placement
from trainer.grpo import grpo_config
from trainer.launch import launcher_prefix, vllm_available
from trainer.recipe import RECIPE, get_profile
from trainer.train import train


@pytest.mark.parametrize("requested, precision, cuda, bf16, expected", [
    ("auto", "auto", True, True, ("cuda", "bfloat16")),      # H100/H200: bf16
    ("auto", "bf16", True, False, ("cuda", "float32")),      # a GPU without bf16 (V100): fp32, never fp16
    ("auto", "fp32", True, True, ("cuda", "float32")),
    ("auto", "bf16", False, False, ("cpu", "float32")),      # the paper profile on a CPU: fp32
    ("cpu", "auto", True, True, ("cpu", "float32")),         # cpu-small pins the CPU even beside a GPU
    ("cuda", "auto", True, True, ("cuda", "bfloat16")),
])
def test_one_rule_places_training_and_evaluation(requested, precision, cuda, bf16, expected):
    assert placement(requested, precision, cuda=cuda, bf16=bf16) == expected


@pytest.mark.parametrize("device, dtype, precision, cpu_bf16, expected", [
    ("cpu", "float32", "bf16", True, "bfloat16"),    # AVX512-BF16/AMX: bf16 matmuls under autocast, fp32 weights
    ("cpu", "float32", "bf16", False, "float32"),    # a CPU without bf16 units stays fp32
    ("cpu", "float32", "auto", True, "float32"),     # only a profile that asks for bf16 gets it on a CPU
    ("cuda", "bfloat16", "bf16", False, "bfloat16"),
])
def test_compute_dtype_is_bf16_on_a_cpu_only_when_asked_and_the_cpu_has_bf16_units(device, dtype, precision,
                                                                                     cpu_bf16, expected):
    from trainer.devices import compute_dtype

    assert compute_dtype(device, dtype, precision, cpu_bf16=cpu_bf16) == expected


def test_asking_for_a_gpu_where_there_is_none_is_one_sentence():
    with pytest.raises(UserError, match="no CUDA GPU is visible"):
        placement("cuda", "auto", cuda=False, bf16=False)
    with pytest.raises(UserError, match="unknown precision"):
        placement("auto", "fp16", cuda=True, bf16=True)


def test_the_launcher_command(tmp_path):
    config = tmp_path / "accelerate.yaml"
    config.write_text("distributed_type: MULTI_GPU\nnum_processes: 4\n")
    assert launcher_prefix() == [sys.executable]
    assert launcher_prefix("accelerate", config) == [sys.executable, "-m", "accelerate.commands.launch",
                                                     "--config_file", str(config.resolve())]
    assert launcher_prefix("torchrun --nproc_per_node 4") == ["torchrun", "--nproc_per_node", "4"]
    with pytest.raises(UserError, match="does not exist"):
        launcher_prefix("accelerate", tmp_path / "missing.yaml")
    with pytest.raises(UserError, match="goes with --launcher accelerate"):
        launcher_prefix(None, config)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    sft, rl = sample_records()
    folder = tmp_path_factory.mktemp("gpu-inputs")
    (folder / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sft[:2]))
    (folder / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rl[:2]))
    return folder / "sft.jsonl", folder / "rl.jsonl"


def test_training_runs_under_accelerate_launch(records, tmp_path):
    config = tmp_path / "accelerate.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nnum_processes: 1\n"
                      "num_machines: 1\nuse_cpu: true\nmixed_precision: 'no'\n")
    summary = train(records[0], None, tmp_path / "out", profile="test", launcher="accelerate",
                    accelerate_config=config, sft_max_steps=1)
    assert summary["sft"]["steps"] == 1 and summary["device"] == "cpu" and summary["dtype"] == "float32"
    assert summary["profile"]["precision"] == "fp32"  # as resolved on this machine
    assert "accelerate" in (tmp_path / "out" / "train.log").read_text()  # accelerate's own launch notice
    assert (tmp_path / "out" / "adapter" / "adapter_model.safetensors").is_file()


def test_vllm_options_reach_trls_config_and_are_refused_without_vllm(records, tmp_path, capsys):
    profile = get_profile("paper").replace(vllm_mode="server", vllm_server_url="http://10.0.0.5:8000")
    config = grpo_config(RECIPE, profile, 1, tmp_path / "g", 0, use_cpu=True)
    assert (config.use_vllm, config.vllm_mode, config.vllm_server_base_url) == (True, "server", "http://10.0.0.5:8000")
    assert config.num_generations == 8 and config.max_completion_length == 512 and config.beta == RECIPE.kl_beta
    colocated = grpo_config(RECIPE, get_profile("test").replace(vllm_mode="colocate"), 1, tmp_path / "c", 0, True)
    assert colocated.use_vllm and colocated.vllm_mode == "colocate"
    assert not grpo_config(RECIPE, get_profile("test"), 1, tmp_path / "n", 0, True).use_vllm
    code = main(["train", "--sft", str(records[0]), "--rl", str(records[1]), "--profile", "test", "--vllm", "colocate",
                 "--out", str(tmp_path / "t"), "--quiet"])
    err = capsys.readouterr().err
    if vllm_available():   # a machine with vLLM starts training; this one has none (checked below)
        assert code != 2 or "vLLM" not in err
    else:
        assert code == 2 and "needs vLLM, which is not installed" in err and err.strip().count("\n") == 0
        assert not (tmp_path / "t").exists()


def test_train_cli_refuses_a_missing_accelerate_config(records, tmp_path, capsys):
    code = main(["train", "--sft", str(records[0]), "--profile", "test", "--launcher", "accelerate",
                 "--accelerate-config", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert code == 2 and "accelerate config" in err and "does not exist" in err and not (tmp_path / "t").exists()


def test_eval_through_an_openai_compatible_server(tmp_path, capsys):
    """What `vllm serve BASE --enable-lora --lora-modules curated=ADAPTER` looks like to eval."""
    call = '<tool_call>{"name": "nothing_useful", "arguments": {}}</tool_call>'
    with LLMServer() as server:
        server.script(*[call] * 4)
        code = main(["eval", "--benchmark", "bfcl-single", "--tasks", "2", "--policy", "openai", "--api", "chat",
                     "--base-url", server.openai_url, "--model", "curated", "--no-steps", "--out", str(tmp_path / "e"),
                     "--quiet", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        bodies = [r.body for r in server.requests]
    doc = json.loads(out)
    assert doc["policy"]["backend"] == "openai" and doc["policy"]["model"] == "curated"
    assert doc["metrics"]["episodes"] == 2 and doc["P"] == 0.0 and doc["metrics"]["call_rate"] == 1.0
    assert {b["model"] for b in bodies} == {"curated"} and len(bodies) == 2
    assert "You can call these functions" in bodies[0]["messages"][0]["content"]
    code = main(["eval", "--policy", "openai", "--model", "curated", "--out", str(tmp_path / "f")])
    assert code == 2 and "needs --base-url" in capsys.readouterr().err


def test_qwen3_4b_architecture_from_its_published_config(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, settings = models.ARCHITECTURES["qwen3-4b-arch"]
    config = AutoConfig.for_model(model_type, **settings)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 4_022_468_096  # Qwen3-4B: 4.0 B with tied embeddings
    # a config-only directory (the random-init marker) loads the same weights every time, no download
    small = tmp_path / "arch"
    AutoConfig.for_model(model_type, **{**settings, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                                        "vocab_size": 512}).save_pretrained(small)
    (small / models.RANDOM_INIT).write_text(json.dumps({"seed": 5}))
    a, b = models.load_model(str(small)), models.load_model(str(small))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert "qwen3-4b-arch" in models.NAMES and models.check_name("qwen3-4b-arch") == "qwen3-4b-arch"


def test_throughput_bench_on_the_tiny_model():
    sft, rl = sample_records(short=True)
    r = measure("test", "tiny-random", sft[:8], rl[:2], sft_steps=2, grpo_steps=2, max_length=256, max_prompt_tokens=256,
                max_completion_length=4)
    assert r["device"] == "cpu" and r["dtype"] == "float32" and "measured fp32 matmul" in r["peak_source"]
    assert set(r["cpu_peaks"]) == {"float32", "bfloat16"} and all(v > 0 for v in r["cpu_peaks"].values())
    for run in ("baseline", "sft"):
        s = r[run]
        assert s["steps"] == 2 and s["measured_steps"] == 1 and s["tokens"] > 0 and s["tokens_per_s"] > 0
        assert 0 < s["mfu"] < 1 and s["peak_memory_mb"] > 0
    assert r["sft_vs_baseline"] == pytest.approx(r["sft"]["tokens_per_s"] / r["baseline"]["tokens_per_s"], rel=1e-2)
    g = r["grpo"]
    assert g["steps"] == 2 and g["completions_per_step"] == 4 and g["generation_s"] > 0 and g["update_s"] > 0
    assert g["generation_s"] + g["update_s"] == pytest.approx(g["step_s"], abs=2e-4)


def test_the_cpu_matmul_rate_shrinks_its_product_to_its_time_and_still_measures_a_rate():
    # a product that would take far longer than the probe's time (on an AVX2-only CPU a 2048² bf16
    # product took 74 s) is measured on a smaller side, so the probe takes about its time
    from bench.throughput import cpu_matmul_rate

    start = time.perf_counter()
    rate, size = cpu_matmul_rate(1, size=8192, seconds=0.05)
    assert size < 8192 and size >= 256 and rate > 0
    assert time.perf_counter() - start < 5   # 8192² in fp32 alone takes ~20 s on one thread here
    rate, size = cpu_matmul_rate(1, size=256, seconds=0.05)
    assert size == 256 and rate > 0


def test_throughput_breakdown_says_where_an_sft_step_goes():
    from bench.throughput import breakdown
    from trainer import data

    sft, _ = sample_records(short=True)
    source = models.resolve("tiny-random")
    examples, _ = data.sft_examples(sft[:6], models.load_tokenizer(source), 256)
    r = breakdown(source, examples, get_profile("test"), steps=2)
    assert set(r["step_s"]) == {"forward", "backward", "optimizer"} and all(v > 0 for v in r["step_s"].values())
    assert sum(r["operator_time_share"].values()) == pytest.approx(1, abs=0.01) and r["operator_time_share"]["matmul"] > 0
    assert 0 <= r["padding_share"] < 1 and r["tokens_per_s"] > 0


def test_throughput_bench_measures_the_sft_model_under_torch_compile():
    # the lever trainer/README.md measured (and rejected) on the CPU: the recipe's model compiled by inductor
    sft, rl = sample_records(short=True)
    r = measure("test", "tiny-random", sft[:8], rl[:2], sft_steps=3, baseline=False, grpo=False, max_length=256,
                torch_compile="static")
    s = r["sft"]
    assert s["torch_compile"] == "static" and s["steps"] == 3 and s["tokens_per_s"] > 0
    assert s["second_half_tokens_per_s"] > 0 and "baseline" not in r and "grpo" not in r
    with pytest.raises(UserError, match="one of static, dynamic"):
        measure("test", "tiny-random", sft[:8], rl[:2], torch_compile="max")
