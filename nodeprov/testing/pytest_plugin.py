"""pytest plugin of nodeprov (registered under ``pytest11``, so it loads by itself).

Fixtures:

- ``scripted_model``: a running :class:`~nodeprov.testing.ScriptedModel` with an empty
  script; call ``scripted_model.extend([...])`` and pass ``scripted_model.agent_env()`` as
  the agent's environment.
- ``scripted_responses``: a running :class:`~nodeprov.testing.ScriptedResponses` (the
  Responses API the Codex CLI talks to) with an empty script; ``extend`` it likewise.
- ``scripted_chat``: a running :class:`~nodeprov.testing.ScriptedChat` (the Chat
  Completions API OpenCode talks to) with an empty script; ``extend`` it likewise.
- ``local_node``: a node of the local provider under the test's ``tmp_path``, destroyed
  after the test (async: mark the test ``@pytest.mark.anyio``).
- ``nodeprov_ssh_host``: a :class:`~nodeprov.testing.containers.SshHostContainer` for the
  session (sshd in a container, logins by a key of its own); pass
  ``nodeprov_ssh_host.provider_settings()`` to the SSH provider.
- ``nodeprov_postgres``: a :class:`~nodeprov.testing.containers.PostgresContainer` for the
  session; ``nodeprov_postgres_url``: a store URL on it in a schema of the test's own,
  dropped after the test.
- ``nodeprov_base_image``: the base image those containers are built from
  (:func:`~nodeprov.testing.containers.default_base_image`); override it in a
  ``conftest.py`` to use another.

The container fixtures need the ``testing`` extra (testcontainers), and a Docker engine;
``nodeprov_postgres_url`` the ``postgres`` extra too.

:func:`require_engine` skips a test whose engine (Docker, sshd, the Claude CLI...) is
missing, except in CI (``CI`` set to 1, yes, on or true, in any case), where a missing engine
is a failure: CI installs them all, so a skip there would hide a broken set-up.

It registers the fake provider (:mod:`nodeprov.testing.fake_provider`) as ``fake`` for the
test process: a test double is never an installed provider that users see.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

from nodeprov.node import NodeHandle
from nodeprov.offline import ScriptedChat, ScriptedModel, ScriptedResponses
from nodeprov.registry import get_provider

if TYPE_CHECKING:
    from nodeprov.testing.containers import PostgresContainer, SshHostContainer

__all__ = [
    "engine_missing",
    "local_node",
    "nodeprov_base_image",
    "nodeprov_postgres",
    "nodeprov_postgres_url",
    "nodeprov_ssh_host",
    "require_engine",
    "scripted_chat",
    "scripted_model",
    "scripted_responses",
]


def pytest_configure(config: pytest.Config) -> None:
    from nodeprov.registry import register_provider
    from nodeprov.testing.fake_provider import FakeProvider

    register_provider("fake", FakeProvider)


def require_engine(what: str, available: bool, how: str = "") -> None:
    """Skip the calling test when ``what`` is not ``available``; fail instead in CI."""
    if not available:
        engine_missing(what, how)


def engine_missing(what: str, how: str = "") -> NoReturn:
    """Skip the calling test because ``what`` is missing (``how`` says how to get it); fail
    instead in CI."""
    message = f"{what} is not available" + (f": {how}" if how else "")
    if os.environ.get("CI", "").strip().lower() in {"1", "yes", "on", "true"}:
        pytest.fail(f"{message} (CI: every engine must be set up)")
    pytest.skip(message)


@pytest.fixture
def scripted_model() -> Iterator[ScriptedModel]:
    """A scripted Messages API on 127.0.0.1, stopped after the test."""
    with ScriptedModel() as model:
        yield model


@pytest.fixture
def scripted_responses() -> Iterator[ScriptedResponses]:
    """A scripted Responses API on 127.0.0.1, stopped after the test."""
    with ScriptedResponses() as model:
        yield model


@pytest.fixture
def scripted_chat() -> Iterator[ScriptedChat]:
    """A scripted Chat Completions API on 127.0.0.1, stopped after the test."""
    with ScriptedChat() as model:
        yield model


@pytest.fixture
async def local_node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    """A local-provider node under ``tmp_path``, destroyed after the test."""
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as node:
        yield node


@contextmanager
def _engine_or_skip() -> Iterator[None]:
    """A test container whose engine, base image or packages are missing skips the test
    (fails it in CI); without the ``testing`` extra, so does importing them."""
    try:
        from nodeprov.testing.containers import EngineUnavailableError
    except ImportError as error:
        engine_missing("testcontainers", f"{error}; install nodeprov[testing]")
    try:
        yield
    except EngineUnavailableError as error:
        engine_missing("what nodeprov's test containers need", str(error))


@pytest.fixture(scope="session")
def nodeprov_base_image() -> str:
    """The image test containers are built from: by default
    :func:`~nodeprov.testing.containers.default_base_image`; a ``conftest.py`` may override
    this fixture to name another."""
    with _engine_or_skip():
        from nodeprov.testing.containers import default_base_image

        return default_base_image()


@pytest.fixture(scope="session")
def nodeprov_ssh_host(nodeprov_base_image: str) -> Iterator[SshHostContainer]:
    """An SSH host in a container for the session, removed after it."""
    with ExitStack() as stack:
        with _engine_or_skip():
            from nodeprov.testing.containers import SshHostContainer

            host = stack.enter_context(SshHostContainer(base_image=nodeprov_base_image))
        yield host


@pytest.fixture(scope="session")
def nodeprov_postgres(nodeprov_base_image: str) -> Iterator[PostgresContainer]:
    """A PostgreSQL server in a container for the session, removed after it."""
    try:
        import psycopg  # noqa: F401 - the container's readiness check and the schemas need it
    except ImportError as error:
        engine_missing("psycopg", f"{error}; install nodeprov[postgres]")
    with ExitStack() as stack:
        with _engine_or_skip():
            from nodeprov.testing.containers import PostgresContainer

            server = stack.enter_context(PostgresContainer(base_image=nodeprov_base_image))
        yield server


@pytest.fixture
def nodeprov_postgres_url(nodeprov_postgres: PostgresContainer) -> Iterator[str]:
    """A store URL on ``nodeprov_postgres`` whose tables go to a schema of this test's own
    (its ``search_path``), dropped after the test."""
    import psycopg

    schema = f"test_{secrets.token_hex(6)}"
    with psycopg.connect(nodeprov_postgres.url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    yield f"{nodeprov_postgres.url}?options=-csearch_path%3D{schema}"
    with psycopg.connect(nodeprov_postgres.url, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
