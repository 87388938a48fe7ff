"""BFCL-V4 (bfcl-eval) multi-turn environment: safe backends, task data, tool schemas."""
from benchmarks.bfcl.backends import (
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
