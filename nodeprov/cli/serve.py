"""The ``serve`` command: the HTTP API (:mod:`nodeprov.service`)."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from ..errors import ConfigError
from .app import StoreOption, app, errors, summary

__all__ = ["serve"]


@app.command(short_help=summary("serve"))
def serve(  # noqa: PLR0917 - one parameter per command-line option
    host: Annotated[
        str | None,
        typer.Option(help="Address to listen on (default 127.0.0.1); beyond loopback, tokens are required."),
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Port to listen on (default 8700; 0: any free one).")
    ] = None,
    store: StoreOption = None,
    checkpoints: Annotated[
        str | None,
        typer.Option(
            envvar="NODEPROV_CHECKPOINTS",
            help="Where runs' checkpoints are kept: file:///PATH, s3://BUCKET/PREFIX (with the s3 "
            "extra) or store: (default: beside a SQLite store's file; in a PostgreSQL store itself).",
        ),
    ] = None,
    tokens_file: Annotated[
        str | None,
        typer.Option(
            help="Add the tokens of this tokens file (`nodeprov tokens create --file`) to the store "
            "at start, e.g. from a mounted Kubernetes Secret."
        ),
    ] = None,
    tls_cert: Annotated[
        str | None,
        typer.Option(help="Serve HTTPS with this certificate (PEM; its chain after it), with --tls-key."),
    ] = None,
    tls_key: Annotated[str | None, typer.Option(help="The private key of --tls-cert (PEM).")] = None,
    behind_proxy: Annotated[
        bool | None,
        typer.Option(
            "--behind-proxy",
            help="TLS ends at a proxy in front of this service (an Ingress, a mesh, a load balancer): "
            "it may listen beyond loopback in plain HTTP.",
        ),
    ] = None,
    trusted_proxy: Annotated[
        list[str] | None,
        typer.Option(
            help="An address or network (CIDR) of a proxy in front of this service, whose "
            "X-Forwarded-For names the client (repeatable).",
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Processes serving the one socket, each a replica of its own.")
    ] = 1,
    provider: Annotated[
        list[str] | None,
        typer.Option(
            "--provider",
            "-p",
            help="A provider clients may use. Repeatable. Default: every installed one (beyond "
            "loopback, less those whose nodes are this host itself).",
        ),
    ] = None,
    node_ttl: Annotated[
        float | None, typer.Option(help="Default lifetime of a node, in hours (default 24).")
    ] = None,
    agent_grace: Annotated[
        float | None,
        typer.Option(
            help="Keep runs' agents on their nodes: they outlive a dropped connection and a dead "
            "replica for this many seconds, and any replica takes such a run over (default 180). "
            "0: not kept.",
            min=0,
        ),
    ] = None,
    allow_setting: Annotated[
        list[str] | None,
        typer.Option(
            help="A provider setting callers may give beyond their own (PROVIDER.NAME, e.g. "
            "ec2.instance_type): endpoints, hosts, credentials and the host's paths are the "
            "operator's otherwise. Repeatable."
        ),
    ] = None,
    allow_option: Annotated[
        list[str] | None,
        typer.Option(
            help="An agent option callers may give beyond their own (AGENT.NAME, e.g. claude.cli_path)."
        ),
    ] = None,
    allow_env: Annotated[
        list[str] | None,
        typer.Option(
            help="An agent environment variable callers may set that reroutes it (e.g. ANTHROPIC_BASE_URL)."
        ),
    ] = None,
) -> None:
    """Serve the HTTP API (docs/service/): nodes, runs, events as
    server-sent events. Stops gracefully on SIGTERM or Ctrl-C: each replica pauses the runs
    it drives (kind system). Every setting (limits, heartbeats, leases) can be given as JSON
    in NODEPROV_SERVE_CONFIG; options given here win."""
    with errors():
        try:
            from ..service import CONFIG_VARIABLE, ServiceConfig
            from ..service import serve as run_service
        except ImportError as error:
            raise ConfigError(
                f"nodeprov serve needs the serve extra: pip install 'nodeprov[serve]' ({error})"
            ) from None
        given = {
            "store": store,
            "checkpoints": checkpoints,
            "tokens_file": tokens_file,
            "host": host,
            "port": port,
            "tls_cert": tls_cert,
            "tls_key": tls_key,
            "behind_proxy": behind_proxy,
            "trusted_proxies": tuple(trusted_proxy) if trusted_proxy else None,
            "providers": tuple(provider) if provider else None,
            "node_ttl": node_ttl * 3600 if node_ttl is not None else None,
            "agent_grace": agent_grace,
            "allow_settings": tuple(allow_setting) if allow_setting else None,
            "allow_options": tuple(allow_option) if allow_option else None,
            "allow_env": tuple(allow_env) if allow_env else None,
        }
        try:
            base = json.loads(os.environ.get(CONFIG_VARIABLE) or "{}")
        except ValueError as error:
            raise ConfigError(f"{CONFIG_VARIABLE} is not JSON: {error}") from None
        config = ServiceConfig.model_validate(base | {k: v for k, v in given.items() if v is not None})
        run_service(config, workers=workers)
