"""What a person sees while training: labelled bars, a line every ~10 steps, no per-step dicts and
no deprecation warnings from the libraries underneath."""
import io

from corpora import load_corpus
from sandbox.curate import execute
from sandbox.process_executor import ProcessExecutor
from sandbox.strategy_files import strategy_files
from trainer.train import train

from conftest import SAMPLE_CORPUS, SEED_STRATEGY


def test_training_console_is_labelled_and_quiet(tmp_path):
    curated = execute(strategy_files(SEED_STRATEGY), load_corpus([str(SAMPLE_CORPUS)]), tmp_path / "c",
                      executor=ProcessExecutor(trusted=True))
    echo = io.StringIO()
    train(curated.out_dir / "sft.jsonl", curated.out_dir / "rl.jsonl", tmp_path / "t", profile="test",
          progress=True, echo=echo)
    text = echo.getvalue()
    assert "SFT:" in text and "GRPO:" in text                       # labelled bars
    assert "SFT step 3/3: loss" in text and "GRPO step 2/2: reward" in text
    assert "{'loss'" not in text and "'train_runtime'" not in text   # no dict per logged step
    assert "Warning" not in text, [line for line in text.splitlines() if "Warning" in line]
