"""nodeprov's test containers (nodeprov.testing.containers): the SSH host logs in its own key
and no other, the PostgreSQL container holds a store, the secrets stay out of the containers'
settings, command lines and logs, leaving a container removes it, and a missing engine or
base image is said plainly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncssh
import docker
import pytest

from nodeprov.store import Store
from nodeprov.testing.containers import EngineUnavailableError, PostgresContainer, SshHostContainer


def _login(host: SshHostContainer, key: asyncssh.SSHKey | str, user: str = "") -> dict[str, Any]:
    """``asyncssh.connect`` options that log in to ``host`` as ``user`` (default: its user)
    with ``key``, its host key pinned, neither an agent nor an OpenSSH configuration read."""
    return {
        "host": host.host,
        "port": host.port,
        "username": user or host.user,
        "client_keys": [key],
        "known_hosts": asyncssh.import_known_hosts(f"[{host.host}]:{host.port} {host.host_key}\n"),
        "agent_path": None,
        "config": [],
    }


@pytest.mark.anyio
async def test_the_ssh_host_logs_in_its_key_and_refuses_another(nodeprov_ssh_host: SshHostContainer) -> None:
    host = nodeprov_ssh_host
    assert host.key_path.stat().st_mode & 0o077 == 0
    async with asyncssh.connect(**_login(host, str(host.key_path))) as connection:
        result = await connection.run("id -un", check=True)
    assert result.stdout == f"{host.user}\n"
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(**_login(host, asyncssh.generate_private_key("ssh-ed25519")))
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(**_login(host, str(host.key_path), user="root"))


@pytest.mark.anyio
async def test_a_store_lives_on_the_postgres_container(
    nodeprov_postgres: PostgresContainer, nodeprov_postgres_url: str
) -> None:
    assert urlsplit(nodeprov_postgres_url).hostname == "127.0.0.1"
    async with await Store.open(nodeprov_postgres_url) as store:
        session = await store.active_session("ws", "claude")
        (server,) = await store.db.fetchall("SELECT inet_server_addr()::text")
    assert server[0] != "127.0.0.1/32"  # the container's own address: its server, not this host's
    async with await Store.open(nodeprov_postgres_url) as store:
        assert (await store.active_session("ws", "claude")).id == session.id


def test_secrets_stay_out_of_the_containers_settings_and_logs(
    docker_client: docker.DockerClient,
    nodeprov_ssh_host: SshHostContainer,
    nodeprov_postgres: PostgresContainer,
) -> None:
    password = urlsplit(nodeprov_postgres.url).password
    assert password
    private_key = "".join(nodeprov_ssh_host.key_path.read_text().splitlines()[1:-1])
    for container, secret in ((nodeprov_postgres, password), (nodeprov_ssh_host, private_key)):
        settings = json.dumps(docker_client.api.inspect_container(container.get_container_id()))
        logs = container.get_wrapped_container().logs().decode()
        commands = container.exec(["ps", "-eo", "args"]).output.decode()
        assert len(secret) > 20
        assert secret not in settings
        assert secret not in logs
        assert secret not in commands


def test_leaving_removes_the_container_and_the_key(
    docker_client: docker.DockerClient, nodeprov_base_image: str
) -> None:
    with SshHostContainer(base_image=nodeprov_base_image) as host:
        ssh_host = host.get_container_id()
        key = host.key_path
        assert key.exists()
        with PostgresContainer(base_image=nodeprov_base_image) as server:
            postgres = server.get_container_id()
            assert docker_client.api.containers(filters={"id": postgres})
        assert docker_client.api.containers(all=True, filters={"id": postgres}) == []
        assert docker_client.api.containers(filters={"id": ssh_host})
    assert docker_client.api.containers(all=True, filters={"id": ssh_host}) == []
    assert not key.parent.exists()


def test_a_missing_engine_or_base_image_is_said_plainly(
    docker_client: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absent = SshHostContainer(base_image="nodeprov-test-absent:none")
    with pytest.raises(EngineUnavailableError, match=r"not in the Docker engine .*docker pull"), absent:
        pass
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(EngineUnavailableError, match="no Docker engine answers"):
        PostgresContainer()
