"""The fixed SFT+GRPO recipe (TRL + PEFT), the base models and the chat format.

Entry points: `trainer.train.train` (and `curateevo train`), `formats.chat_format` (rendering and
tool-call parsing, shared with evaluation), `trainer.models.load_policy`, `trainer.rewards`.
See trainer/README.md.
"""
