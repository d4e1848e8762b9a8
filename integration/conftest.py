"""Fixtures for tests on real engines. A missing engine skips (fails under CI=true)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from nodeprov.testing.pytest_plugin import require_engine

IMAGES = Path(__file__).parent / "images"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """The local Docker engine (`make engines` starts one)."""
    try:
        client = docker.from_env()
        client.ping()
    except (docker.errors.DockerException, OSError) as error:
        require_engine("a Docker engine", False, f"{error}; `make engines` starts one")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client: docker.DockerClient) -> str:
    """The offline-built Debian base image (cached by its recipe's hash)."""
    build = IMAGES / "build-base.sh"
    done = subprocess.run([build], capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        require_engine("the test base image", False, done.stderr.strip()[-2000:])
    return done.stdout.strip().splitlines()[-1]
