"""Fixtures for tests on real engines. A missing engine skips (fails under CI=true)."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import docker.errors
import psycopg
import pytest

from nodeprov.store import Store
from nodeprov.testing.exception_check import exception_check_fixture
from nodeprov.testing.pytest_plugin import require_engine

from .kubernetes import Cluster, running_cluster
from .sshd import Sshd, running_sshd

IMAGES = Path(__file__).parent / "images"
POSTGRES = os.environ.get(
    "NODEPROV_TEST_POSTGRES_URL", "postgresql://nodeprov:nodeprov@127.0.0.1:5432/nodeprov_test"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


check_public_api_exceptions = exception_check_fixture()


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


@pytest.fixture(scope="session")
def sshd() -> Iterator[Sshd]:
    """A real OpenSSH sshd on 127.0.0.1, logins as root and as an unprivileged user."""
    with running_sshd() as server:
        yield server


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A store in an SQLite file of this test's own."""
    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as opened:
        yield opened


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A store URL on the test PostgreSQL server, in a schema of this test's own. The schemas
    are made over a plain connection: a store opened on the database's default schema would
    migrate it, and that schema outlives the run (one an older nodeprov left may refuse)."""
    try:
        admin = await psycopg.AsyncConnection.connect(POSTGRES, autocommit=True)
    except Exception as error:  # any failure to reach the server means: no engine
        require_engine("a PostgreSQL server", False, f"{error}; `make engines` starts one")
    schema = f"t_{secrets.token_hex(4)}"
    async with admin:
        await admin.execute(f"CREATE SCHEMA {schema}")
        yield f"{POSTGRES}?options=-csearch_path%3D{schema}"
        await admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(scope="session")
def kubernetes_cluster(base_image: str) -> Iterator[Cluster]:
    """A single-node Kubernetes 1.20 of the session's own (``scripts/kubernetes.sh`` builds
    it once per machine), with the test base image imported. Pods need ``hostNetwork: true``,
    ``imagePullPolicy: Never``, ``automountServiceAccountToken: false`` and a toleration of
    ``node.kubernetes.io/not-ready`` (see integration/kubernetes.py)."""
    script = Path(__file__).parent.parent / "scripts" / "kubernetes.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        require_engine("a Kubernetes cluster", False, done.stderr.strip()[-2000:])
    with running_cluster(Path(done.stdout.strip().splitlines()[-1])) as cluster:
        cluster.import_docker_image(base_image)
        yield cluster


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests on Kubernetes run last: the cluster starts at the first of them, and on a new
    machine `make test` builds it beside the tests before them (scripts/kubernetes.sh).

    The Gemini CLI's conformance runs on local, Docker and SSH nodes, not in a pod: it is a
    node.js program beside its package, which a pod can be given only in its image (the
    provider mounts this machine's tools one file each); the test cluster's image has neither."""
    in_a_pod = [
        item
        for item in items
        if _params(item).get("harness") == "gemini" and _params(item).get("provider") == "kubernetes"
    ]
    if in_a_pod:
        config.hook.pytest_deselected(items=in_a_pod)
        items[:] = [item for item in items if item not in in_a_pod]
    items.sort(key=lambda item: item.nodeid.startswith("integration/") and "kubernetes" in item.nodeid)


def _params(item: pytest.Item) -> dict[str, object]:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec is not None else {}


@pytest.fixture(scope="session")
def nodeprov_base_image(base_image: str) -> str:
    """nodeprov's test containers (``nodeprov_ssh_host``, ``nodeprov_postgres``) are built
    from the offline-built base image."""
    return base_image
