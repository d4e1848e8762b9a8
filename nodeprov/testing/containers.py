"""Throwaway engines for testing a control plane built on nodeprov: an SSH host and a
PostgreSQL store, each a `testcontainers <https://testcontainers-python.readthedocs.io>`_
container (install the ``testing`` extra: ``pip install 'nodeprov[testing]'``).

- :class:`SshHostContainer`: OpenSSH's sshd and a non-root user who logs in with a key made
  for this container alone. :meth:`SshHostContainer.provider_settings` are the SSH
  provider's settings that reach it (host 127.0.0.1, the published port, the user, the key
  file, the host key pinned), so a test of the SSH provider needs nothing but Docker.
- :class:`PostgresContainer`: a PostgreSQL server with a role and a database of its own;
  :attr:`PostgresContainer.url` is a ``postgresql://`` URL :meth:`nodeprov.store.Store.open`
  accepts (install the ``postgres`` extra too).

Both are context managers: the container starts on ``__enter__``, once the engine inside
answers (sshd sends its banner; PostgreSQL runs a query for the role), and is removed on
``__exit__``. The pytest plugin offers them as fixtures (``nodeprov_ssh_host``,
``nodeprov_postgres``, ``nodeprov_postgres_url``)::

    from nodeprov.testing.containers import SshHostContainer

    with SshHostContainer() as host:
        provider = get_provider("ssh", **host.provider_settings())

**Images come from Debian packages, not a registry.** Nothing is pulled: an image is
``FROM`` a base image already in the engine (:func:`default_base_image`), plus the
Debian packages (``openssh-server``; ``postgresql``) that this machine's own ``apt-get``
downloads from its own mirror against the base image's package list, installed by
``dpkg`` in a build without network. So the base image must be of this machine's
distribution and release (``debian:bookworm-slim`` on Debian 12, ``ubuntu:noble`` on
Ubuntu 24.04; or one made with ``debootstrap`` and ``docker import``), and this machine
needs ``apt-get`` with current package lists (``apt-get update``). An image is tagged by a
hash of its recipe and of the base image's id, so it is built once per engine.

**Secrets.** The SSH client key is made here, per container, in a directory only this
user can read (removed with the container); the container receives only its public half.
The PostgreSQL password is random per container; the container receives only its
SCRAM-SHA-256 verifier. Neither appears in a command line, a container's settings or a
log.

**Network.** Ports are published on 127.0.0.1 only, on a port the engine picks.
testcontainers' reaper (Ryuk) is not used: its image comes from Docker Hub. A container is
removed when its context manager exits (or :meth:`~SshHostContainer.stop` is called); one
left behind by a killed test process carries testcontainers' labels
(``org.testcontainers=true``).

A missing Docker engine, base image or ``apt-get`` raises :class:`EngineUnavailableError`,
which says what is missing; the pytest fixtures turn it into a skip (a failure in CI).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import docker
import docker.errors
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer

from nodeprov.errors import ConfigError, NodeprovError

__all__ = [
    "BASE_IMAGE_VARIABLE",
    "ContainerStartError",
    "EngineUnavailableError",
    "PostgresContainer",
    "SshHostContainer",
    "default_base_image",
]

BASE_IMAGE_VARIABLE = "NODEPROV_TEST_BASE_IMAGE"
"""The environment variable naming the base image, when :func:`default_base_image` should
not derive it from this machine's release."""

_LOOPBACK = "127.0.0.1"
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,30}")


class EngineUnavailableError(NodeprovError):
    """What a test container needs is missing: a Docker engine, the base image, or this
    machine's ``apt-get``. The message says which, and how to get it."""


class ContainerStartError(NodeprovError):
    """A test container's image did not build, or its engine did not answer in time. The
    message holds the end of the build's or the container's log."""


def default_base_image() -> str:
    """The base image test containers are built from: ``$NODEPROV_TEST_BASE_IMAGE`` when set,
    else the official image of this machine's release (``/etc/os-release``), whose packages
    this machine's ``apt-get`` downloads: ``debian:CODENAME-slim`` or ``ubuntu:CODENAME``.
    It must already be in the engine: nothing is pulled."""
    named = os.environ.get(BASE_IMAGE_VARIABLE, "").strip()
    if named:
        return named
    release: dict[str, str] = {}
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            key, _, value = line.partition("=")
            release[key] = value.strip().strip('"')
    except OSError:
        pass
    distribution, codename = release.get("ID", ""), release.get("VERSION_CODENAME", "")
    if distribution == "debian" and codename:
        return f"debian:{codename}-slim"
    if distribution == "ubuntu" and codename:
        return f"ubuntu:{codename}"
    raise EngineUnavailableError(
        f"test containers install this machine's Debian packages, and this is not Debian or Ubuntu "
        f"({distribution or 'unknown'}): set {BASE_IMAGE_VARIABLE} to an image of a release whose "
        "packages this machine's apt-get downloads"
    )


@dataclass(frozen=True)
class _Recipe:
    """An image: Debian ``packages`` on a base image, then ``setup`` (a shell script run at
    build time) and ``entrypoint`` (the script each container runs)."""

    name: str
    packages: tuple[str, ...]
    setup: str
    entrypoint: str

    def dockerfile(self, base_image: str) -> str:
        return (
            f"FROM {base_image}\n"
            "COPY debs /tmp/nodeprov-debs\n"
            "COPY setup.sh entrypoint.sh /usr/local/lib/nodeprov/\n"
            # dpkg, not apt: apt cannot install package files without package lists, and
            # the base image has none (nor a network to fetch them).
            "RUN DEBIAN_FRONTEND=noninteractive dpkg --install /tmp/nodeprov-debs/*.deb"
            " && rm -rf /tmp/nodeprov-debs && sh -eu /usr/local/lib/nodeprov/setup.sh\n"
            'CMD ["sh", "-eu", "/usr/local/lib/nodeprov/entrypoint.sh"]\n'
        )

    def build(self, client: docker.DockerClient, base_image: str) -> str:
        """The image's tag, built first unless the engine has it already."""
        try:
            base_id = client.images.get(base_image).id
        except docker.errors.ImageNotFound:
            raise EngineUnavailableError(
                f"the base image {base_image} is not in the Docker engine (nothing is pulled): "
                f"`docker pull {base_image}`, or build one offline (debootstrap, then docker import) "
                f"and name it in {BASE_IMAGE_VARIABLE}"
            ) from None
        recipe = "\0".join([base_id or base_image, self.dockerfile(base_image), self.setup, self.entrypoint])
        tag = f"{self.name}:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            self._build(client, base_image, tag)
        return tag

    def _build(self, client: docker.DockerClient, base_image: str, tag: str) -> None:
        with tempfile.TemporaryDirectory(prefix="nodeprov-image-") as directory:
            context = Path(directory)
            status = context / "status"
            status.write_bytes(
                client.containers.run(
                    base_image, ["cat", "/var/lib/dpkg/status"], remove=True, network_mode="none"
                )
            )
            debs = context / "debs"
            _download_packages(self.packages, status, debs)
            status.unlink()
            (context / "Dockerfile").write_text(self.dockerfile(base_image))
            (context / "setup.sh").write_text(self.setup)
            (context / "entrypoint.sh").write_text(self.entrypoint)
            try:
                client.images.build(path=str(context), tag=tag, rm=True, network_mode="none")
            except docker.errors.BuildError as error:
                log = "".join(
                    str(entry.get("stream") or entry.get("error") or "") for entry in error.build_log
                )
                raise ContainerStartError(f"building {tag} failed: {error.msg}\n{log[-3000:]}") from None


def _download_packages(packages: tuple[str, ...], status: Path, into: Path) -> None:
    """Download ``packages`` and what they need beyond what the base image has (its dpkg
    ``status`` file) into ``into``, with this machine's apt-get and package lists."""
    apt_get = shutil.which("apt-get")
    if apt_get is None:
        raise EngineUnavailableError(
            "test container images are built from this machine's Debian packages, and apt-get is missing"
        )
    (into / "partial").mkdir(parents=True)
    done = subprocess.run(  # noqa: S603 - apt-get by its resolved path, fixed arguments
        [
            apt_get,
            "--download-only",
            "--yes",
            "--quiet",
            "--no-install-recommends",
            "-o",
            f"Dir::State::status={status}",
            "-o",
            f"Dir::Cache::archives={into}",
            "-o",
            "Debug::NoLocking=true",  # the machine's own dpkg state is not touched: no lock needed
            "install",
            *packages,
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    if done.returncode != 0:
        raise EngineUnavailableError(
            f"apt-get could not download {' '.join(packages)} (are its package lists current? "
            f"`apt-get update`): {done.stderr.strip()[-2000:]}"
        )
    shutil.rmtree(into / "partial")
    (into / "lock").unlink(missing_ok=True)


@contextmanager
def _without_reaper() -> Iterator[None]:
    """Start without testcontainers' reaper, whose image is pulled from Docker Hub; the
    caller removes its container itself. The setting is put back for other containers."""
    previous = testcontainers_config.ryuk_disabled
    testcontainers_config.ryuk_disabled = True
    try:
        yield
    finally:
        testcontainers_config.ryuk_disabled = previous


class _EngineContainer(DockerContainer):
    """A container of an image built by a :class:`_Recipe`, its ``port`` published on
    127.0.0.1, handed over once :meth:`_ready` says its engine answers."""

    _recipe: _Recipe
    _port: int

    def __init__(
        self, *, base_image: str | None, start_timeout: float, docker_client_kw: dict[str, Any] | None
    ):
        try:  # the image is named for now: start() builds it and sets its tag
            super().__init__(self._recipe.name, docker_client_kw=docker_client_kw)
        except docker.errors.DockerException as error:
            raise EngineUnavailableError(
                f"no Docker engine answers ({error}): start one, or set DOCKER_HOST"
            ) from None
        self._base_image = base_image
        self._start_timeout = start_timeout
        # docker-py reads ("127.0.0.1", 0) as: a free port, on loopback only; testcontainers
        # types its port map for bare port numbers.
        self.ports[f"{self._port}/tcp"] = (_LOOPBACK, 0)  # type: ignore[assignment]

    @property
    def host(self) -> str:
        """Where the engine is reached: always 127.0.0.1."""
        return _LOOPBACK

    @property
    def port(self) -> int:
        """The port on 127.0.0.1 the engine's port is published on."""
        return int(self.get_docker_client().port(self.get_container_id(), self._port))

    def start(self) -> Self:
        """Build the image unless the engine has it, start the container, and return once
        its engine answers (:class:`ContainerStartError` if it does not in time)."""
        self.image = self._recipe.build(
            self.get_docker_client().client, self._base_image or default_base_image()
        )
        with _without_reaper():
            super().start()
        self._wait_until_ready()
        return self

    def _ready(self) -> bool:
        """Whether the engine in the container answers (each engine says how)."""
        raise NotImplementedError

    def _wait_until_ready(self) -> None:
        """Poll :meth:`_ready` (the state is in another process: nothing to wait on) until
        it holds; fail at once if the container exits, or at ``start_timeout``."""
        what = f"{self._recipe.name} answering on {_LOOPBACK}:{self.port}"
        deadline = time.monotonic() + self._start_timeout
        container = self.get_wrapped_container()
        while not self._ready():
            container.reload()
            if container.status not in {"created", "running"} or time.monotonic() > deadline:
                log = container.logs().decode(errors="replace")[-3000:]
                raise ContainerStartError(f"no {what} ({container.status}); its log:\n{log}")
            time.sleep(0.1)

    def _exec_checked(self, *argv: str) -> str:
        """Run ``argv`` in the container as root; its output, or :class:`ContainerStartError`
        if it fails."""
        result = self.exec(list(argv))
        text = result.output.decode(errors="replace")
        if result.exit_code != 0:
            raise ContainerStartError(f"{argv[0]} failed ({result.exit_code}): {text[-2000:]}")
        return text


_SSHD = _Recipe(
    name="nodeprov-testing-sshd",
    packages=("openssh-server",),
    setup="""\
# Host keys are made per container, at its start.
rm -f /etc/ssh/ssh_host_*
# Keys only; no PAM (its login records need privileges a container lacks).
cat > /etc/ssh/sshd_config.d/nodeprov.conf <<'EOF'
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UsePAM no
EOF
""",
    entrypoint="""\
useradd --create-home --shell /bin/sh -p '*' "$NODEPROV_SSH_USER"  # '*': no password, not locked
home=$(getent passwd "$NODEPROV_SSH_USER" | cut -d: -f6)
mkdir -p -m 0700 "$home/.ssh"
printf '%s\\n' "$NODEPROV_AUTHORIZED_KEY" > "$home/.ssh/authorized_keys"
chmod 0600 "$home/.ssh/authorized_keys"
chown -R "$NODEPROV_SSH_USER:" "$home/.ssh"
ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
mkdir -p -m 0755 /run/sshd
exec /usr/sbin/sshd -D -e -o HostKey=/etc/ssh/ssh_host_ed25519_key -o "AllowUsers=$NODEPROV_SSH_USER"
""",
)


class SshHostContainer(_EngineContainer):
    """An SSH host in a container: OpenSSH's sshd on a port of 127.0.0.1, and ``user`` (not
    root; ``nodeprov`` by default), who logs in with a fresh ed25519 key.

    After ``__enter__`` (or :meth:`start`): :attr:`host`, :attr:`port`, :attr:`user`,
    :attr:`key_path` (the private key file, 0600), :attr:`host_key` (the server's public
    key, to pin) and :meth:`provider_settings`. The image is built from ``base_image``
    (default: :func:`default_base_image`) on first use; ``start_timeout`` bounds the wait
    for sshd. ``docker_client_kw`` goes to ``docker.DockerClient``.
    """

    _recipe = _SSHD
    _port = 22

    def __init__(
        self,
        *,
        user: str = "nodeprov",
        base_image: str | None = None,
        start_timeout: float = 60.0,
        docker_client_kw: dict[str, Any] | None = None,
    ) -> None:
        if not _NAME.fullmatch(user) or user == "root":
            raise ConfigError(f"{user!r} is not a user name for the SSH host (lower case, not root)")
        super().__init__(
            base_image=base_image, start_timeout=start_timeout, docker_client_kw=docker_client_kw
        )
        self.user = user
        self._keys: Path | None = None
        self._host_key = ""

    @property
    def key_path(self) -> Path:
        """The private key ``user`` logs in with (OpenSSH format, 0600)."""
        if self._keys is None:
            raise ContainerStartError("the SSH host is not started")
        return self._keys / "id_ed25519"

    @property
    def host_key(self) -> str:
        """The server's public host key (``ssh-ed25519 AAAA...``), made for this container."""
        if not self._host_key:
            raise ContainerStartError("the SSH host is not started")
        return self._host_key

    def provider_settings(self, **more: object) -> dict[str, object]:
        """Settings of nodeprov's SSH provider that log in to this host as :attr:`user`, the
        host key pinned, no SSH agent and no ``~/.ssh/config``; ``more`` adds or replaces
        settings (``root``, ``ttl``...)."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "key_files": [str(self.key_path)],
            "host_key": self.host_key,
            "use_agent": False,
            "config_files": [],
            **more,
        }

    def start(self) -> Self:
        import asyncssh  # the SSH provider's own library: whoever tests it has it

        self._keys = Path(tempfile.mkdtemp(prefix="nodeprov-ssh-host-"))
        key = asyncssh.generate_private_key("ssh-ed25519", comment=f"nodeprov-testing@{self.user}")
        key.write_private_key(str(self.key_path))  # in a directory of mode 0700 from the start
        self.key_path.chmod(0o600)  # as OpenSSH's client insists
        self.with_env("NODEPROV_SSH_USER", self.user)
        self.with_env("NODEPROV_AUTHORIZED_KEY", key.export_public_key().decode().strip())
        super().start()
        algorithm, public, *_ = self._exec_checked("cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()
        self._host_key = f"{algorithm} {public}"
        return self

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        """Remove the container and the client key."""
        try:
            super().stop(force=force, delete_volume=delete_volume)
        finally:
            if self._keys is not None:
                shutil.rmtree(self._keys, ignore_errors=True)

    def _ready(self) -> bool:
        """sshd answers a connection with its banner (the engine's port forwarder accepts
        connections before sshd listens, and closes them)."""
        try:
            with socket.create_connection((_LOOPBACK, self.port), timeout=5) as connection:
                return connection.recv(4).startswith(b"SSH-")
        except OSError:
            return False


_POSTGRES = _Recipe(
    name="nodeprov-testing-postgres",
    packages=("postgresql",),
    setup="""\
version=$(ls /usr/lib/postgresql)
# Reached through the engine's port forwarder, whose address is not 127.0.0.1.
echo 'host all all all scram-sha-256' >> "/etc/postgresql/$version/main/pg_hba.conf"
# A throwaway server: durability is not wanted, speed is.
cat > "/etc/postgresql/$version/main/conf.d/nodeprov.conf" <<'EOF'
listen_addresses = '*'
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
""",
    entrypoint="""\
version=$(ls /usr/lib/postgresql)
postgres=/usr/lib/postgresql/$version/bin/postgres
options="-D /var/lib/postgresql/$version/main -c config_file=/etc/postgresql/$version/main/postgresql.conf"
mkdir -p /run/postgresql && chown postgres: /run/postgresql
# The role is made with the password's SCRAM verifier: the password itself never comes here.
runuser -u postgres -- "$postgres" --single $options postgres >/dev/null <<EOF
CREATE ROLE "$NODEPROV_POSTGRES_USER" LOGIN PASSWORD '$NODEPROV_POSTGRES_VERIFIER'
CREATE DATABASE "$NODEPROV_POSTGRES_DATABASE" OWNER "$NODEPROV_POSTGRES_USER"
EOF
exec runuser -u postgres -- "$postgres" $options
""",
)


def _scram_sha256_verifier(password: str) -> str:
    """PostgreSQL's stored form of ``password`` (RFC 5802, 4096 iterations), from which the
    password cannot be read back."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 4096)
    stored_key = hashlib.sha256(hmac.digest(salted, b"Client Key", "sha256")).digest()
    server_key = hmac.digest(salted, b"Server Key", "sha256")

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return f"SCRAM-SHA-256$4096:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


class PostgresContainer(_EngineContainer):
    """A PostgreSQL server (Debian's ``postgresql``) in a container, on a port of 127.0.0.1,
    with the role ``user`` (a random password) owning ``database``.

    After ``__enter__`` (or :meth:`start`): :attr:`url`, a ``postgresql://`` URL that
    :meth:`nodeprov.store.Store.open` accepts. The image is built from ``base_image``
    (default: :func:`default_base_image`) on first use; ``start_timeout`` bounds the wait
    until the role can log in. Needs ``psycopg`` (the ``postgres`` extra).
    """

    _recipe = _POSTGRES
    _port = 5432

    def __init__(
        self,
        *,
        user: str = "nodeprov",
        database: str = "nodeprov",
        base_image: str | None = None,
        start_timeout: float = 120.0,
        docker_client_kw: dict[str, Any] | None = None,
    ) -> None:
        for name in (user, database):
            if not _NAME.fullmatch(name):
                raise ConfigError(f"{name!r} is not a PostgreSQL name here (lower case letters, digits, _)")
        super().__init__(
            base_image=base_image, start_timeout=start_timeout, docker_client_kw=docker_client_kw
        )
        self.user = user
        self.database = database
        self._password = secrets.token_urlsafe(24)

    @property
    def url(self) -> str:
        """``postgresql://USER:PASSWORD@127.0.0.1:PORT/DATABASE``: the password is in it, so
        keep it out of logs."""
        return f"postgresql://{self.user}:{self._password}@{self.host}:{self.port}/{self.database}"

    def start(self) -> Self:
        self.with_env("NODEPROV_POSTGRES_USER", self.user)
        self.with_env("NODEPROV_POSTGRES_DATABASE", self.database)
        self.with_env("NODEPROV_POSTGRES_VERIFIER", _scram_sha256_verifier(self._password))
        return super().start()

    def _ready(self) -> bool:
        """The role logs in over the published port and runs a query."""
        import psycopg

        try:
            with psycopg.connect(self.url, connect_timeout=5) as connection:
                return connection.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False
