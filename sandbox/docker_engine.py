"""The local Docker engine, as the executor and the image builder both reach it.

The SDK is imported on first use: the CLI loads the image module for every command, and most
commands never talk to an engine (importing the SDK costs about 0.13 s)."""
from __future__ import annotations

from base.errors import RunFailed


def docker_client(timeout: float = 30.0):
    """A client of the local engine (`docker.DockerClient`), or RunFailed with the fix when none answers."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except DockerException as exc:
        raise RunFailed(f"no Docker engine answers ({str(exc).splitlines()[0][:160]}); run `bash scripts/setup.sh` "
                        "as root to install and start one (scripts/docker-engine.sh)") from None


def image_exists(client, tag: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False
