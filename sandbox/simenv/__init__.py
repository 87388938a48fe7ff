"""Simulated interaction (ctx.env): BFCL scenarios rebuilt inside the sandbox, calls executed on
the project's safe backends (literal arguments only, nothing `eval`ed). `calls` and `episode` are
pure Python shared with environments/bfcl/backends.py; `environment` is what a strategy gets;
`export` (host side) writes the train-split scenario folder an execution mounts."""
