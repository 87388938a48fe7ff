"""The quality benchmark (`curateevo bench quality`): does evolved curation beat no curation,
beyond noise? Rows and cells (rows.py, cells.py), statistics (stats.py), report (table.py)."""
from sandbox.executor import PROJECT_ROOT

CACHE = PROJECT_ROOT / "runs" / "bench-quality"
"""Where cells, curations and trainings are cached (`--cache`'s default; `run` reads the calibration here)."""
RESULTS = PROJECT_ROOT / "bench" / "results"
"""Where a table's raw result is written (`--out`'s default)."""

TABLE1 = ("rho0-wild", "agentrefine", "runs", "oracle", "rho0-labeled")
"""Table 1's rows, in order (`runs`: the final strategy of each given run)."""

ROWS = (*TABLE1, "augment", "noisy", "poisoned")
"""Every row name `--rows` accepts: Table 1's, and the augmenting reference strategy (issue 12),
which is no row of the paper's table and so not in the default; the calibration's rows: ρ0 on the
records labelled noisy and on a deliberately corrupted copy (experiments/quality/calibration.py)."""

CALIBRATION = ("rho0-wild", "oracle", "poisoned", "augment", "noisy")
"""The rows `bench quality --calibrate` trains: rows that must differ if the instrument sees data."""

TEST_TASKS = 120
"""Tasks a table scores by default on the test split (or bfcl-single's tuning slice), balanced over
its categories (`Setting.tasks`, `--tasks`)."""
DEV_TASKS = 60
"""Dev tasks `bench quality --split dev` (`--spread`, `--calibrate`) scores by default."""
SEEDS = 2
"""Training seeds per row by default, seeds 0..SEEDS−1 (`Setting.seeds`, `--seeds`)."""
