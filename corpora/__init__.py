"""Loading the raw corpus: the formats real public trajectory data comes in, as canonical records.

- `reading`: which files a path names (a folder stands for its JSON/JSONL files; FIFOs and
  devices are refused unopened) and the JSON values each file holds (JSONL, a JSON array, or
  pretty-printed JSON documents);
- `openai`: OpenAI-style chat records and their published variants (tau-bench, ToolBench);
- `sharegpt`, `adp`: the ShareGPT and Agent Data Protocol converters;
- `loader`: `load_corpus`, which names every refused value as `path:line: reason`;
- `split`: the deterministic 9:1 dev hold-out and the benchmark a corpus implies.
"""
from corpora.adp import code_tool_name
from corpora.loader import (FORMATS, Corpus, SkippedLine, convert_record, corpus_sha256,
                                   detect_format, load_corpus, write_corpus)
from corpora.reading import DEFAULT_MAX_LINE_BYTES, file_sha256, iter_lines
from corpora.split import corpus_kind, holdout, split_ids, train_part

__all__ = ["DEFAULT_MAX_LINE_BYTES", "FORMATS", "Corpus", "SkippedLine", "code_tool_name",
           "convert_record", "corpus_kind", "corpus_sha256", "detect_format", "file_sha256",
           "holdout", "iter_lines", "load_corpus", "split_ids", "train_part", "write_corpus"]
