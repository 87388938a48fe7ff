"""The chat format: how records become model text (messages + tools ↔ model text), one template for
training and evaluation. (Named `chat_format`, not `formats`, so it is not confused with the corpus
formats `corpora.FORMATS` reads.)"""
