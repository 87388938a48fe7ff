"""The curated files are TRL-, axolotl- and Arrow-native: stock `datasets`, `pyarrow.json`,
`trl.SFTTrainer(assistant_only_loss=True)` and `trl.GRPOTrainer` read them as written, and the
tokens that carry loss are exactly the weight-1 assistant turns."""
import json
import subprocess
import sys

import pyarrow.json
import pytest
from datasets import load_dataset

from conftest import curate_files
from sandbox.process_executor import ProcessExecutor
from chat_format import chat_format as cf
from sandbox import exchange
from trainer import data, models, rewards, trl_patches

from conftest import ROOT

KINDS = ("sft", "rl", "memory")


def cli(*args):
    done = subprocess.run([sys.executable, "-m", "evolver.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def wild(tmp_path_factory):
    """The default wild bfcl-single corpus curated by the seed strategy in the Docker sandbox."""
    root = tmp_path_factory.mktemp("wild")
    cli("corpus", "build", "bfcl-single", "--setting", "wild", "--out", str(root / "D"))
    cli("curate", "--corpus", str(root / "D" / "corpus.jsonl"), "--out", str(root / "O"), "--sandbox", "docker")
    return root / "O"


@pytest.fixture(scope="module")
def refined(sample_corpus, tmp_path_factory):
    """AgentRefine on the multi-turn sample corpus: SFT records with weight-0 turns, memory records."""
    out = tmp_path_factory.mktemp("refined") / "O"
    curate_files(ROOT / "curation_strategies" / "agentrefine", [sample_corpus], out, executor=ProcessExecutor())
    return out


@pytest.fixture(scope="module")
def tiny():
    source = str(models.tiny_model_dir())
    return source, models.load_tokenizer(source)


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_artifact_loads_with_datasets_and_pyarrow(wild, refined):
    loaded = 0
    for out in (wild, refined):
        for kind in KINDS:
            path = out / f"{kind}.jsonl"
            n = len(lines(path))
            if n == 0:  # neither library reads an empty JSONL file (no rows, no schema)
                assert kind == "memory" and out == wild
                continue
            assert pyarrow.json.read_json(path).num_rows == n
            ds = load_dataset("json", data_files=str(path), split="train")
            assert ds.num_rows == n
            loaded += 1
    assert loaded == 5
    sft = load_dataset("json", data_files=str(wild / "sft.jsonl"), split="train")
    assert isinstance(sft[0]["tools"], str) and json.loads(sft[0]["tools"])[0]["type"] == "function"
    assert json.loads(sft[0]["meta"])["provenance"] == [{"how": "kept", "op": "sft_record"}]   # issue 29
    assert isinstance(sft[0]["tool_list"][0]["function"]["parameters"], str)  # axolotl: field_tools: tool_list


def test_a_file_row_reads_back_as_the_record_it_was_written_from(refined):
    for kind in KINDS:
        for row in lines(refined / f"{kind}.jsonl")[:20]:
            record = exchange.from_file(kind, row)
            assert exchange.from_file(kind, exchange.to_file(kind, record)) == record
            assert data._CHECKS.get(kind, lambda r: None)(record) is None
    bad = lines(refined / "sft.jsonl")[0]
    bad["weights"] = [0] * len(bad.get("weights") or [1])
    with pytest.raises(ValueError, match="disagree with the messages' training flags"):
        exchange.from_file("sft", bad)


def test_each_sft_message_carries_its_training_flag(refined):
    masked = 0
    for row in lines(refined / "sft.jsonl"):
        flags = [m["training"] for m in row["messages"]]
        weights = row.get("weights") or [1] * sum(m["role"] == "assistant" for m in row["messages"])
        assert [f for f, m in zip(flags, row["messages"]) if m["role"] == "assistant"] == [bool(w) for w in weights]
        assert not any(f for f, m in zip(flags, row["messages"]) if m["role"] != "assistant")
        masked += 0 in weights
    assert masked >= 2  # AgentRefine masked some erroneous turns


def trained_text(tokenizer, ids, mask):
    return tokenizer.decode([t for t, m in zip(ids, mask) if m])


def test_stock_sft_trainer_with_assistant_only_loss_trains_exactly_the_weight_1_turns(refined, tiny, tmp_path):
    from trl import SFTConfig, SFTTrainer

    source, tokenizer = tiny
    trl_patches.apply()  # CPU speed only (trainer/trl_patches.py): the same losses
    ds = load_dataset("json", data_files=str(refined / "sft.jsonl"), split="train")
    by_length = sorted(range(len(ds)), key=lambda i: len(json.dumps(ds[i]["messages"])))
    masked = [i for i in by_length if ds[i]["weights"] and 0 in ds[i]["weights"]]
    ds = ds.select(masked[:1] + [i for i in by_length if i not in masked][:1])
    assert 0 in ds[0]["weights"]  # one record with a masked (weight-0) assistant turn
    # with its provenance (issue 29) in the meta string column: which operators made it, how
    assert [s["how"] for s in json.loads(ds[0]["meta"])["provenance"]][-1] in ("masked", "segmented")
    trainer = SFTTrainer(model=models.load_model(source), train_dataset=ds, processing_class=tokenizer,
                         args=SFTConfig(output_dir=str(tmp_path), assistant_only_loss=True, max_steps=1,
                                        per_device_train_batch_size=2, max_length=8192, use_cpu=True, bf16=False,
                                        gradient_checkpointing=False, report_to="none", save_strategy="no",
                                        logging_steps=1))
    trainer.train()
    assert trainer.state.global_step == 1 and trainer.state.log_history[0]["loss"] > 0
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(ds))])
    for i, row in enumerate(ds):
        record = exchange.from_file("sft", row)
        ours = data.sft_example(record, tokenizer, 8192)
        ids = trainer.train_dataset[i]["input_ids"]
        assert ids == ours["input_ids"]  # TRL renders the file exactly as the recipe does
        labels = batch["labels"][i][:len(ids)].tolist()
        assert labels == ours["labels"]
        assistant = [m for m in record["messages"] if m["role"] == "assistant"]
        expected = "".join(cf.render_assistant(m) + cf.IM_END for m, w in zip(assistant, record["weights"]) if w)
        assert tokenizer.decode([t for t in labels if t != -100]) == expected


def test_stock_grpo_trainer_reads_the_prompt_column_and_the_reward_functions(wild, tiny, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    source, tokenizer = tiny
    ds = load_dataset("json", data_files=str(wild / "rl.jsonl"), split="train").select(range(2))
    for row in ds:  # the tools reach the prompt: the recipe's own prompt text
        record = exchange.from_file("rl", row)
        assert tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True) == \
            cf.render_prompt(record["messages"], record["tools"])
    trainer = GRPOTrainer(model=models.load_model(source), processing_class=tokenizer, train_dataset=ds,
                          reward_funcs=[rewards.tool_call_match_reward, rewards.state_match_reward],
                          args=GRPOConfig(output_dir=str(tmp_path), max_steps=1, num_generations=2,
                                          per_device_train_batch_size=2, max_completion_length=8, use_cpu=True,
                                          bf16=False, gradient_checkpointing=False, report_to="none",
                                          save_strategy="no", logging_steps=1))
    trainer.train()
    logged = trainer.state.log_history[0]
    assert trainer.state.global_step == 1
    assert rewards.UNPARSEABLE <= logged["rewards/state_match/mean"] <= 1  # every wild RL record names state_match


def test_an_adapter_names_the_base_models_hub_id_and_loads_with_auto_peft_model(tmp_path):
    """Saved as the worker saves it; loaded here from the local conversion, offline."""
    import torch
    from peft import AutoPeftModelForCausalLM, PeftModel, get_peft_model

    from trainer.recipe import RECIPE
    from trainer.sft import lora_config

    source = models.resolve(models.EMBEDDED)
    torch.manual_seed(0)
    model = get_peft_model(models.load_model(source), lora_config(RECIPE))
    for name, param in model.named_parameters():  # a non-trivial adapter: B = 0 would hide a lost one
        if "lora_B" in name:
            param.data.normal_(std=0.02)
    models.name_base(model, models.base_model_id(models.EMBEDDED, source))
    model.save_pretrained(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"

    loaded = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter", cache_dir=models.hub_cache_dir(),
                                                      local_files_only=True)
    assert isinstance(loaded, PeftModel)
    ids = torch.tensor([[1, 2, 3, 4]])
    model.eval()
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-5)
        with loaded.disable_adapter():
            base = loaded(ids).logits
        assert not torch.allclose(loaded(ids).logits, base, atol=1e-4)  # the adapter was loaded, not dropped
