"""Formats: how records become model text (the chat format: messages + tools ↔ model text)."""
