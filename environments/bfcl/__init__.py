"""BFCL-V4 (bfcl-eval): the environments "bfcl" (multi-turn) and "bfcl-single" (environment.py), safe
backends, task data, tool schemas, scenario export, leakage rows, corpus builders."""
from environments.bfcl.backends import (
    CallError,
    Episode,
    format_call,
    function_docs,
    load_ground_truth,
    load_tasks,
    parse_call,
    serialize_result,
    task_number,
    tool_schema,
    tool_schemas,
)

__all__ = ["CallError", "Episode", "format_call", "function_docs", "load_ground_truth", "load_tasks",
           "parse_call", "serialize_result", "task_number", "tool_schema", "tool_schemas"]
