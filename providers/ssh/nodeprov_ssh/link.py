"""The login settings shared by every provider that reaches its nodes over SSH, and
:class:`Link`: one connection to a host, shared by the node's spawns and made again when it
drops. asyncssh's exceptions stop here; callers see nodeprov's."""

from __future__ import annotations

import functools
import getpass
import logging
import os
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import anyio
import anyio.to_thread
import asyncssh
from anyio.abc import Process
from pydantic import Field

from nodeprov.errors import ConfigError, NodeGoneError, NodeprovError, ProviderError
from nodeprov.node import ProviderSettings, secret_field
from nodeprov_ssh.process import Session, open_session

__all__ = [
    "Link",
    "SshHostKeyError",
    "SshLoginSettings",
    "SshSessionSettings",
    "Tunnel",
    "connect_options",
    "mapped_errors",
]

logger = logging.getLogger("nodeprov.ssh")


class SshHostKeyError(ConfigError):
    """The host's key is not the one known for it (or none is known): the connection was
    refused before logging in. Add the key to ``known_hosts`` or pin it with ``host_key``."""


class SshSessionSettings(ProviderSettings):
    """How to log in over SSH, whatever carries the connection: the base of the settings of
    every provider whose nodes are reached over SSH."""

    user: str | None = Field(
        default=None, description="User to log in as; default: ~/.ssh/config's, else this machine's user."
    )
    key_files: list[str] | None = Field(
        default=None,
        description="Private key files to log in with; default: ~/.ssh/config's IdentityFile, "
        "else OpenSSH's default key files.",
    )
    passphrase: str | None = secret_field(default=None, description="Passphrase of the key files.")
    use_agent: bool = Field(default=True, description="Offer the keys of the SSH agent (SSH_AUTH_SOCK).")
    connect_timeout: float = Field(default=20.0, gt=0, description="Seconds to connect and log in.")
    keepalive_interval: float = Field(
        default=5.0,
        gt=0,
        description="Seconds of silence from the host before a keepalive is sent; with "
        "keepalive_count_max, a dead link is noticed within interval x (count + 1) seconds.",
    )
    keepalive_count_max: int = Field(
        default=3, ge=1, description="Unanswered keepalives after which the connection is dropped."
    )
    sftp: bool = Field(
        default=True,
        description="Move node files over SFTP when the host offers it (else, or with false, "
        "over the exec channel with sh and cat).",
    )
    max_sessions: int = Field(
        default=10,
        ge=1,
        description="Sessions one connection carries at once (the server's MaxSessions, 10 by "
        "default in OpenSSH); more concurrent processes open more connections.",
    )


class SshLoginSettings(SshSessionSettings):
    """How to reach and log in to a host over SSH (TCP): defaults are OpenSSH's
    (``~/.ssh/config``, ``~/.ssh/known_hosts``, the SSH agent, the default key files)."""

    port: int | None = Field(
        default=None, ge=1, le=65535, description="Port; default: ~/.ssh/config's, else 22."
    )
    config_files: list[str] | None = Field(
        default=None,
        description="OpenSSH client configuration files (Host aliases, HostName, User, Port, "
        "IdentityFile, ProxyJump...); default: ~/.ssh/config when it exists; [] reads none.",
    )
    known_hosts: str | None = Field(
        default=None,
        description="known_hosts file holding the host's key; default: ~/.ssh/known_hosts. "
        "A host whose key is not there is refused.",
    )
    host_key: str | None = Field(
        default=None,
        description="The host's public key, pinned ('ssh-ed25519 AAAA...'); when given, it is "
        "the only key accepted and known_hosts is not read.",
    )
    insecure_skip_host_key_check: bool = Field(
        default=False,
        description="Accept any host key. INSECURE: anyone between here and the host can read "
        "and change everything sent, secrets included; logged as a warning on every connection.",
    )


@dataclass(frozen=True)
class Tunnel:
    """A command whose stdin and stdout carry the SSH connection, as OpenSSH's
    ProxyCommand (``gh codespace ssh -c NAME --stdio``). The command authenticates the
    host itself, so the host key of the first connection is accepted and pinned for the
    link's later connections. It runs with ``env`` as its whole environment; what it
    writes on stderr is the error when the connection cannot be made."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    explain: Callable[[str], NodeprovError] | None = None
    """The error that what the command wrote on stderr means, when the connection failed
    (by default the SSH error, with that text)."""


# AES-GCM first: OpenSSL runs it in hardware, where asyncssh's ChaCha20-Poly1305 (OpenSSH's
# first choice) is slower; every cipher OpenSSH offers by default is still accepted.
_CIPHERS = [
    "aes256-gcm@openssh.com",
    "aes128-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
]


def connect_options(settings: SshSessionSettings) -> dict[str, Any]:
    """The keyword arguments of :func:`asyncssh.connect` for ``settings`` (without a host
    key check unless they are :class:`SshLoginSettings`).

    Raises:
        ConfigError: the pinned host key cannot be read.
    """
    options: dict[str, Any] = {
        "encryption_algs": _CIPHERS,
        "connect_timeout": settings.connect_timeout,
        "login_timeout": settings.connect_timeout,
        "keepalive_interval": settings.keepalive_interval,
        "keepalive_count_max": settings.keepalive_count_max,
        "config": None,
        "known_hosts": None,
    }
    if settings.user is not None:
        options["username"] = settings.user
    if settings.key_files is not None:
        options["client_keys"] = settings.key_files
    if settings.passphrase is not None:
        options["passphrase"] = settings.passphrase
    if not settings.use_agent:
        options["agent_path"] = None
    if not isinstance(settings, SshLoginSettings):
        return options
    # () is asyncssh's "the default file"; None reads none.
    options["config"] = () if settings.config_files is None else (settings.config_files or None)
    del options["known_hosts"]
    if settings.port is not None:
        options["port"] = settings.port
    if settings.insecure_skip_host_key_check:
        options["known_hosts"] = None
    elif settings.host_key is not None:
        try:
            key = asyncssh.import_public_key(settings.host_key)
        except (asyncssh.KeyImportError, ValueError) as error:
            raise ConfigError(f"host_key cannot be read: {error}") from None
        options["known_hosts"] = ([key], [], [])
    elif settings.known_hosts is not None:
        options["known_hosts"] = settings.known_hosts
    return options


def _refuse_silent_known_hosts(host: str, options: dict[str, Any]) -> None:
    """Refuse an OpenSSH config that turns host-key checking off for ``host`` without the
    settings saying so: ``UserKnownHostsFile none`` (asyncssh then checks nothing). Host-key
    checking is off only when ``insecure_skip_host_key_check`` says it is.

    Raises:
        SshHostKeyError: the config turns it off.
    """
    from asyncssh.config import SSHClientConfig

    paths = options["config"] or [os.path.expanduser("~/.ssh/config")]
    paths = [path for path in paths if os.path.isfile(os.path.expanduser(path))]
    if not paths:
        return
    try:
        config = SSHClientConfig.load(None, paths, False, False, False, getpass.getuser(), None, host, None)
    except (OSError, ValueError, asyncssh.Error) as error:
        raise ConfigError(f"{host}: cannot read the SSH config ({error})") from None
    if config.get("UserKnownHostsFile", None) == []:  # "none"
        raise SshHostKeyError(
            f"{host}: the SSH config's UserKnownHostsFile none turns host-key checking off: "
            "refused; give known_hosts or host_key, or set insecure_skip_host_key_check=true to mean it"
        )


@contextmanager
def mapped_errors(host: str) -> Iterator[None]:
    """asyncssh's and the socket's exceptions, as nodeprov's. A lost connection is
    :class:`~nodeprov.errors.NodeGoneError`: what ran over it is out of reach."""
    try:
        yield
    except asyncssh.HostKeyNotVerifiable as error:
        raise SshHostKeyError(
            f"{host}: host key not verifiable ({error.reason}): no known_hosts entry for it, "
            "or its key changed"
        ) from None
    except asyncssh.PermissionDenied as error:
        raise ConfigError(f"{host}: login refused ({error.reason})") from None
    except (asyncssh.ConnectionLost, BrokenPipeError, ConnectionResetError) as error:
        raise NodeGoneError(f"{host}: the SSH connection was lost ({error})") from None
    except asyncssh.ChannelOpenError as error:
        raise ProviderError(f"{host}: the SSH server refused a session ({error.reason})") from None
    except asyncssh.DisconnectError as error:
        raise NodeGoneError(f"{host}: the SSH connection was closed ({error.reason})") from None
    except asyncssh.KeyEncryptionError as error:  # a passphrase that is wrong
        raise ConfigError(f"{host}: a key file cannot be decrypted: {error}") from None
    except asyncssh.KeyImportError as error:
        if "passphrase" in str(error).lower():  # a secret never stored: a reconcile must be given it
            raise ConfigError(
                f"{host}: a key file is encrypted and no passphrase was given ({error}): set the "
                "setting passphrase (-s passphrase=... or NODEPROV_<PROVIDER>_PASSPHRASE)"
            ) from None
        raise ConfigError(f"{host}: a key file cannot be read: {error}") from None
    except asyncssh.Error as error:
        raise ProviderError(f"{host}: SSH failed: {error}") from None
    except TimeoutError:
        raise ProviderError(f"{host}: no SSH answer in time") from None
    except OSError as error:
        raise ProviderError(f"{host}: cannot reach the SSH server: {error}") from None


@dataclass
class _Connection:
    connection: asyncssh.SSHClientConnection
    sessions: int = 0
    room: int = 0  # sessions it may carry: the server's MaxSessions, as far as we know
    tunnel: Process | None = None


class Link:
    """SSH connections to ``host`` with ``settings``: one, made on first use and shared by
    every caller, and made again when it has dropped. A connection carries at most
    ``max_sessions`` sessions at once (OpenSSH's MaxSessions, 10 by default); more
    concurrent sessions open further connections, closed again by :meth:`aclose`. With a
    ``tunnel``, each connection runs over a process of its own (see :class:`Tunnel`)."""

    def __init__(self, host: str, settings: SshSessionSettings, tunnel: Tunnel | None = None) -> None:
        self.host = host
        self.settings = settings
        self.tunnel = tunnel
        self._options = connect_options(settings)
        self._connections: list[_Connection] = []
        self._lock = anyio.Lock()
        self._sftp: tuple[_Connection, asyncssh.SFTPClient] | None = None
        self._sftp_lock = anyio.Lock()
        self._sftp_off = not settings.sftp

    async def open(self, command: str) -> Session:
        """Start ``command`` in a new session.

        Raises:
            SshHostKeyError: the host key is not the known one.
            ConfigError: the login was refused, or the settings are unusable.
            ProviderError: the host could not be reached in ``connect_timeout``, or refused.
            NodeGoneError: the connection dropped meanwhile.
        """
        for _ in range(3):
            chosen = await self._with_room()
            try:
                with mapped_errors(self.host):
                    try:
                        session = await open_session(chosen.connection, command)
                    except asyncssh.ChannelOpenError:
                        if chosen.sessions == 1:
                            raise
                        chosen.sessions -= 1
                        chosen.room = chosen.sessions  # the server allows fewer: use another
                        continue
            except BaseException:
                chosen.sessions -= 1
                raise
            session.on_closed(functools.partial(self._closed, chosen))
            return session
        raise ProviderError(f"{self.host}: the SSH server refused a session (too many)")

    async def sftp(self) -> asyncssh.SFTPClient | None:
        """An SFTP client on one of the connections (made on first use, again after a
        drop), or ``None`` when the host offers no SFTP (or ``sftp`` is off).

        Raises:
            as :meth:`open`.
        """
        async with self._sftp_lock:
            if self._sftp is not None and not self._sftp[0].connection.is_closed():
                return self._sftp[1]
            if self._sftp_off:
                return None
            entry = await self._with_room()  # the SFTP session holds its place for good
            try:
                with mapped_errors(self.host):
                    client = await entry.connection.start_sftp_client()
            except ProviderError:
                entry.sessions -= 1
                self._sftp_off = True
                logger.info("%s offers no SFTP: node files go over the exec channel", self.host)
                return None
            except BaseException:
                entry.sessions -= 1
                raise
            self._sftp = (entry, client)
            return client

    def _closed(self, entry: _Connection) -> None:
        entry.sessions -= 1

    async def _with_room(self) -> _Connection:
        async with self._lock:
            for entry in self._connections:
                if entry.connection.is_closed():
                    await _end(entry.tunnel)
            self._connections = [c for c in self._connections if not c.connection.is_closed()]
            for entry in self._connections:
                if entry.sessions < entry.room:
                    entry.sessions += 1
                    return entry
            entry = await (self._through_tunnel(self.tunnel) if self.tunnel else self._direct())
            self._connections.append(entry)
            return entry

    async def _direct(self) -> _Connection:
        if getattr(self.settings, "insecure_skip_host_key_check", False):
            logger.warning("INSECURE: not checking the SSH host key of %s", self.host)
        elif self._options.get("config", None) is not None and "known_hosts" not in self._options:
            await anyio.to_thread.run_sync(_refuse_silent_known_hosts, self.host, self._options)
        with mapped_errors(self.host):
            # asyncssh's own connect_timeout covers the TCP connect and the login.
            connection = await asyncssh.connect(self.host, **self._options)
        return _Connection(connection, sessions=1, room=self.settings.max_sessions)

    async def _through_tunnel(self, tunnel: Tunnel) -> _Connection:
        errors = await anyio.to_thread.run_sync(tempfile.TemporaryFile)
        with errors:
            ours, theirs = socket.socketpair()
            try:
                with theirs:  # the tunnel's end: held by it alone, so its exit is an EOF here
                    process = await anyio.open_process(
                        list(tunnel.argv),
                        stdin=theirs.fileno(),
                        stdout=theirs.fileno(),
                        stderr=errors,
                        env=dict(tunnel.env),
                        start_new_session=True,
                    )
            except OSError as error:
                ours.close()
                raise ConfigError(f"{self.host}: cannot run {tunnel.argv[0]}: {error}") from None
            try:
                with mapped_errors(self.host):
                    connection = await asyncssh.connect(self.host, sock=ours, **self._options)
            except BaseException as error:
                ours.close()
                await _end(process)
                said = await anyio.to_thread.run_sync(_tail, errors)
                if isinstance(error, NodeprovError) and said:
                    raise (
                        tunnel.explain(said) if tunnel.explain else type(error)(f"{error}: {said}")
                    ) from None
                raise
        # The tunnel authenticated the host: its key now stands for it on every later connection.
        self._options["known_hosts"] = ([connection.get_server_host_key()], [], [])
        return _Connection(connection, sessions=1, room=self.settings.max_sessions, tunnel=process)

    async def aclose(self) -> None:
        """Close the connections (what runs over them loses its channels); idempotent."""
        connections, self._connections = self._connections, []
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            for entry in connections:
                entry.connection.close()
                await entry.connection.wait_closed()
                await _end(entry.tunnel)


async def _end(process: Process | None) -> None:
    """Stop a tunnel's process (its connection is closed or failed) and reap it."""
    if process is None or process.returncode is not None:
        return
    with anyio.CancelScope(shield=True):
        process.kill()
        await process.wait()


def _tail(file: IO[bytes]) -> str:
    file.seek(0)
    return file.read().decode(errors="replace").strip()[-500:]
