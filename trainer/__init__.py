"""The fixed SFT+GRPO recipe (TRL + PEFT) and the base models.

Entry points: `trainer.train.train` (and `curateevo train`), `trainer.models.load_policy`,
`trainer.rewards`. The chat format the recipe trains in (rendering and tool-call parsing, shared
with evaluation) is `chat_format.chat_format`, a floor below. See trainer/README.md.
"""
