"""Memory at evaluation: the retrieval of `trainer.memory` (its `hints`, the one function that
serves evaluation and training alike; it lives on the trainer's floor so both ends import it)."""
from trainer.memory import (DEFAULT_K, HEADER, RETRIEVAL, MemoryIndex, about_tool, hint_block, hints,  # noqa: F401
                            inject, provenance, query_of, read_memory, tool_name)
