"""RunConfig and the quality bench's Setting nest the training and evaluation specs (issue 61,
item 1): `cfg.train` is a `trainer.train.TrainSpec`, `cfg.eval` a `benchmarks.evaluate.EvalSpec`.
A run.json written before, with the specs' fields flat, reads back to the same resolved config,
and the bench's cache keys are the ones computed before the nesting."""
from benchmarks.quality import rows as rows_mod
from benchmarks.quality.cells import Cells, Setting
from sandbox.process_executor import ProcessExecutor

# computed on main at abee770, before the nesting
PINNED = {"default": ("cdd2ece79fb6c40fa49243b3", "7744bb19d19c34e457be1b1a"),
          "changed": ("0862e8e1777886e8e5d69fd0", "420b1ccdf05cce2964f7056f")}


def test_a_cells_training_and_cell_keys_are_the_ones_computed_before_the_specs_were_nested(quality_corpora, tmp_path):
    wild, labeled = quality_corpora
    row = rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, None)[0]
    settings = {"default": Setting(tasks=5, profile="test", seeds=(0,)),
                "changed": Setting(split="dev", tasks=5, profile="test", base="tiny-random", seeds=(0,), batch_size=4,
                                   max_new_tokens=64, budget={"sft_max_steps": 2})}
    keys = {}
    for name, setting in settings.items():
        cells = Cells(tmp_path / "cache", setting, ProcessExecutor())
        keys[name] = (cells.training_key(row, 0), cells.cell_key(row, 0))
    assert keys == PINNED
