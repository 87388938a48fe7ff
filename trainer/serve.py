"""A local OpenAI-compatible server over a base model: `transformers serve` (the server transformers
ships: chat completions, streaming and not, `/v1/models`), not one written here.

    curateevo serve [--base smollm2-135m] [--port 8000] [--host localhost]

serves the embedded SmolLM2-135M-Instruct (built offline from its package, trainer/models.py) at
http://HOST:PORT/v1; `transformers serve` names the model by its directory, which the command prints
(`--user-model THAT --user-base-url http://localhost:8000/v1`; any OpenAI-compatible client can use it).
The server decodes greedily unless a request asks for sampling; it stays in the foreground until
interrupted. `start()` runs the same command as a child process and waits until it answers (the
tests' real server).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from base.errors import UserError

DEFAULT_PORT = 8000
READY_TIMEOUT_S = 180.0


def command(base: str, port: int, host: str = "localhost", threads: int | None = None) -> tuple[list[str], dict]:
    """(argv, environment) of `transformers serve` for base model `base` (a name trainer.models knows or
    a local directory); the server names the model by that directory (argv[2])."""
    from trainer.models import resolve

    model = resolve(base)
    exe = Path(sys.executable).with_name("transformers")
    argv = [str(exe), "serve", model, "--host", host, "--port", str(port), "--device", "cpu",
            "--log-level", "warning"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return argv, env


def base_url(port: int, host: str = "localhost") -> str:
    return f"http://{host}:{port}/v1"


def wait_ready(url: str, proc: subprocess.Popen | None = None, timeout: float = READY_TIMEOUT_S) -> None:
    """Return once GET {url}/models answers 200; RuntimeError if `proc` dies or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the model server exited with code {proc.returncode} before it answered")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the model server at {url} did not answer within {timeout:.0f} s")


def start(base: str = "smollm2-135m", port: int = DEFAULT_PORT, host: str = "localhost",
          threads: int | None = None, log: Path | None = None) -> tuple[subprocess.Popen, str, str]:
    """(process, base URL, served model name): `transformers serve` started and answering."""
    argv, env = command(base, port, host, threads)
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = base_url(port, host)
    try:
        wait_ready(url, proc)
    except BaseException:
        stop(proc)
        raise
    return proc, url, argv[2]   # the server names the model by its directory


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cmd_serve(args) -> int:
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        raise UserError("`transformers serve` needs fastapi and uvicorn: run `bash scripts/setup.sh` (they are in the lock)")
    argv, env = command(args.base, args.port, args.host, args.threads)
    print(f"curateevo serve: {args.base} at {base_url(args.port, args.host)} as model {argv[2]!r} "
          f"(Ctrl-C stops it)", file=sys.stderr, flush=True)
    try:
        return subprocess.call(argv, env=env)
    except KeyboardInterrupt:
        return 0


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve a base model as a local OpenAI-compatible server (transformers serve)")
    p.add_argument("--base", default="smollm2-135m", help="base model name or directory (default: the embedded one)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--host", default="localhost")
    p.add_argument("--threads", type=int, default=None, help="CPU threads the server decodes on (default: torch's)")
    p.set_defaults(func=cmd_serve)
