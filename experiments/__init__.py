"""Experiments: what the project does with its environments — train a curation and evaluate it
(`train_eval`: `train_on` / `evaluate_on`), the quality bench (`quality/`), `curateevo eval`.
Above the environments (`environments/`), below the loop (`evolver/`)."""
