"""Running the service: :func:`serve` binds its address, checks that it may listen there,
and serves on uvicorn, in this process or in ``workers`` processes sharing the socket
(each a replica with its own lease). SIGTERM or SIGINT stops it gracefully: event streams
end (their clients reconnect elsewhere with Last-Event-ID), requests under way finish, then
each replica pauses the runs it drives (kind ``system``) and releases its lease. Before
listening, :func:`add_file_tokens` adds the tokens of its tokens file to the store."""

from __future__ import annotations

import logging
import os
import signal
import socket
import ssl
import sys
from types import FrameType

import anyio
import uvicorn
from uvicorn.supervisors import Multiprocess

from ..errors import ConfigError
from ..store import Store, read_tokens_file
from .app import CONFIG_VARIABLE, create_app
from .config import ServiceConfig

__all__ = ["add_file_tokens", "check_exposure", "listening_socket", "serve"]

logger = logging.getLogger("nodeprov.service")


async def add_file_tokens(config: ServiceConfig) -> None:
    """Add the tokens of ``config.tokens_file`` to the store, each unless the store has its
    hash already (see :meth:`~nodeprov.store.TokenStore.add`).

    Raises:
        ConfigError: the file cannot be read or is invalid.
        StoreError: the store could not be written.
    """
    if config.tokens_file is None:
        return
    entries = read_tokens_file(config.tokens_file)
    async with await Store.open(config.store) as store:
        added = [
            entry
            for entry in entries
            if await store.tokens.add(entry.name, entry.scopes, entry.sha256, entry.tenant)
        ]
    logger.info(
        "tokens file %s: %d tokens, %d of them new to the store", config.tokens_file, len(entries), len(added)
    )


async def check_exposure(config: ServiceConfig) -> None:
    """Refuse to listen beyond loopback in plain HTTP (unless TLS ends at a proxy in front of
    it: ``behind_proxy``), or without a token in the store.

    Raises:
        ConfigError: ``config.host`` is not loopback, and neither TLS nor ``behind_proxy`` is
            set, or the store has no active token.
        StoreError: the store could not be read.
    """
    if config.loopback:
        return
    if not config.tls and not config.behind_proxy:
        raise ConfigError(
            f"refusing to listen on {config.host} in plain HTTP, where tokens would cross the network "
            "in clear: give --tls-cert and --tls-key, or --behind-proxy when TLS ends at a proxy in "
            "front of this service"
        )
    async with await Store.open(config.store) as store:
        if not await store.tokens.any_active():
            raise ConfigError(
                f"refusing to listen on {config.host} without tokens: create one first "
                "(nodeprov tokens create NAME --scope admin; or --file FILE, for --tokens-file FILE), "
                "or listen on 127.0.0.1"
            )


def serve(config: ServiceConfig, *, workers: int = 1) -> None:
    """Serve until SIGTERM or SIGINT (see the module), once the tokens of its tokens file are
    in the store. Says where it listens on stdout, in one line (``listening on
    http://HOST:PORT``), once the socket is bound.

    Raises:
        ConfigError: as :func:`add_file_tokens` and :func:`check_exposure`; ``workers`` below 1;
            the address cannot be bound.
        StoreError: the store could not be read.
    """
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    anyio.run(add_file_tokens, config)
    anyio.run(check_exposure, config)
    if config.tls_cert is not None:
        _check_certificate(config.tls_cert, config.tls_key)
    sock = listening_socket(config.host, config.port)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    options = {
        "log_config": None,  # the CLI configures logging, never the library
        "lifespan": "on",
        "timeout_graceful_shutdown": config.shutdown_timeout,
        "proxy_headers": bool(config.trusted_proxies),
        "forwarded_allow_ips": list(config.trusted_proxies),
        "ssl_certfile": config.tls_cert,
        "ssl_keyfile": config.tls_key,
    }
    bound = config.model_copy(update={"port": port})
    print(f"listening on {'https' if config.tls else 'http'}://{config.host}:{port}", flush=True)
    if workers == 1:
        server = uvicorn.Server(uvicorn.Config(create_app(bound), **options))  # type: ignore[arg-type]
        # Once stopped, uvicorn raises again the signal that stopped it: a stop on SIGTERM is
        # graceful, and ends with status 0 (and one before uvicorn listens for it stops too).
        previous = signal.signal(signal.SIGTERM, _stopped)
        try:
            server.run(sockets=[sock])
        finally:
            signal.signal(signal.SIGTERM, previous)
    else:
        os.environ[CONFIG_VARIABLE] = bound.model_dump_json()  # the workers' configuration: never in argv
        uv_config = uvicorn.Config(
            "nodeprov.service.app:app_from_environment",
            factory=True,
            workers=workers,
            **options,  # type: ignore[arg-type]
        )
        Multiprocess(uv_config, sockets=[sock]).run()
    sys.stdout.flush()


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (0: a free port) for uvicorn to listen on.

    Raises:
        ConfigError: it cannot be bound (the address is in use, say).
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: an answer written in two parts (headers, then body)
    # is not held back until the client's delayed ACK (44 ms a request on a kept-alive
    # connection without it; bench/keepalive.py).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    return sock


def _check_certificate(cert: str, key: str | None) -> None:
    """Raises ConfigError unless ``cert`` and ``key`` load (before uvicorn tries, which would
    fail in each worker with a traceback)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"cannot use the TLS certificate {cert} with its key {key}: {error}") from None


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)
