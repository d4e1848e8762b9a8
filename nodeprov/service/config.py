"""The service's configuration: what ``nodeprov serve`` is given."""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import Field, field_validator, model_validator

from ..runs.spec import KEPT_AGENT_GRACE
from ..settings import Settings

__all__ = ["ServiceConfig", "is_loopback"]


class ServiceConfig(Settings):
    """How a ``nodeprov serve`` process runs. Unknown fields are refused."""

    store: str | None = Field(
        default=None,
        description="Store URL (sqlite:///PATH or postgresql://...); replicas share a PostgreSQL one. "
        "Default: the SQLite file under the user's state directory.",
    )
    checkpoints: str | None = Field(
        default=None,
        description="Where runs' checkpoints (workspaces with their agents' sessions) are kept: "
        "file:///PATH, s3://BUCKET/PREFIX or store:. Default: beside a SQLite store's file; in a "
        "PostgreSQL store itself, which replicas share.",
    )
    tokens_file: str | None = Field(
        default=None,
        description="A tokens file (`nodeprov tokens create --file`: tokens' hashes, no secret), e.g. "
        "mounted from a Kubernetes Secret: its tokens are added to the store at start, each unless "
        "the store has it already (then it is left as it is, revoked if it was).",
    )
    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=8700, ge=0, le=65535, description="Port to listen on (0: any free one).")
    tls_cert: str | None = Field(
        default=None,
        description="Serve HTTPS with this certificate file (PEM, its chain after it); needs tls_key.",
    )
    tls_key: str | None = Field(default=None, description="The private key of tls_cert (a PEM file).")
    behind_proxy: bool = Field(
        default=False,
        description="TLS ends at a proxy in front of this service (an Ingress, a mesh, a load balancer): "
        "it may listen beyond loopback in plain HTTP. Without it or TLS, it may not.",
    )
    trusted_proxies: tuple[str, ...] = Field(
        default=(),
        description="Addresses or networks (CIDR) of the proxies in front of this service, whose "
        "X-Forwarded-For names the client: the address a failed authentication counts against. "
        "Without them, every client behind a proxy is the proxy's one address.",
    )
    providers: tuple[str, ...] | None = Field(
        default=None,
        description="The providers clients may use. Default: every installed one, less, when listening "
        "beyond loopback, those whose nodes are this host itself (local).",
    )
    node_ttl: float = Field(default=86400.0, gt=0, description="Default lifetime of a node, in seconds.")
    allow_settings: tuple[str, ...] = Field(
        default=(),
        description="Provider settings a caller may give beyond those its provider declares a caller's "
        "(PROVIDER.NAME, e.g. ec2.instance_type): the others are the operator's.",
    )
    allow_options: tuple[str, ...] = Field(
        default=(),
        description="Agent options a caller may give beyond those its agent declares a caller's "
        "(AGENT.NAME, e.g. claude.mcp_servers).",
    )
    allow_env: tuple[str, ...] = Field(
        default=(),
        description="Agent environment variables a caller may set that would reroute the agent's traffic "
        "or load code into it (e.g. ANTHROPIC_BASE_URL).",
    )
    auth_failures: int = Field(
        default=20,
        ge=1,
        description="Failed attempts to authenticate a client address may make in auth_failure_window; "
        "then it is refused (429) until the window ends.",
    )
    auth_failure_window: float = Field(
        default=60.0, gt=0, allow_inf_nan=False, description="The window of auth_failures, in seconds."
    )
    max_body: int = Field(
        default=48 << 20, gt=0, description="Largest request body (JSON), in bytes: 413 above."
    )
    max_file: int = Field(default=8 << 30, gt=0, description="Largest file upload, in bytes: 413 above.")
    heartbeat: float = Field(
        default=15.0, gt=0, description="Seconds between an idle event stream's heartbeats."
    )
    send_timeout: float = Field(
        default=30.0,
        gt=0,
        description="A client that reads nothing of its event stream for this many seconds is "
        "disconnected (it reconnects with Last-Event-ID).",
    )
    max_lag: float = Field(
        default=30.0,
        gt=0,
        description="A client whose event stream falls this many seconds behind its run is cut off "
        "(told so in a last event named 'cutoff'; it reconnects with Last-Event-ID).",
    )
    lease_ttl: float = Field(default=30.0, gt=0, description="The replica's lease in the store, in seconds.")
    agent_grace: float | None = Field(
        default=KEPT_AGENT_GRACE,
        ge=2,
        description="Keep each run's agent on its node: it outlives a dropped connection and a dead "
        "replica for this many seconds with none attached, and any replica's reconcile takes such a "
        "run over. 0 or None: agents are not kept (a dead replica's runs fail, resumable).",
    )
    poll_interval: float = Field(
        default=0.5, gt=0, description="How often runs driven by another replica are polled for events."
    )
    keep_pools: bool = Field(
        default=True,
        description="Keep the store's warm pools filled (one replica holds each pool at a time; "
        "another takes it over when that one dies).",
    )
    shutdown_timeout: float = Field(
        default=30.0, gt=0, description="Seconds a stopping replica has to pause its runs."
    )
    idempotency_ttl: float = Field(
        default=86400.0, gt=0, description="How long an Idempotency-Key is remembered, in seconds."
    )
    retention: float | None = Field(
        default=30 * 86400.0,
        ge=0,
        allow_inf_nan=False,
        description="Seconds a run that is over (paused, finished, failed) stays in the store once nothing "
        "touches it; then it is deleted with its events, snapshots, transcript and images (one replica of "
        "those sharing the store prunes, at most hourly). None: everything is kept.",
    )
    store_retry: float = Field(
        default=60.0,
        ge=0,
        allow_inf_nan=False,
        description="Seconds a store that stops answering (a dropped connection, a restarting server) is "
        "tried again before a call fails; a run fails only past it, and says so.",
    )
    request_store_retry: float = Field(
        default=5.0,
        ge=0,
        allow_inf_nan=False,
        description="Seconds a request waits for a store that stops answering before it is answered 503 "
        "(store_unavailable), at most store_retry: a client tries again, while the runs ride it out.",
    )

    @model_validator(mode="after")
    def _key_with_cert(self) -> ServiceConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        return self

    @field_validator("trusted_proxies")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            ipaddress.ip_network(entry, strict=False)  # ValueError: not an address or network
        return value

    @field_validator("agent_grace", mode="before")
    @classmethod
    def _zero_is_not_kept(cls, value: Any) -> Any:
        return None if value == 0 else value

    @property
    def loopback(self) -> bool:
        """Whether the service listens on loopback only."""
        return is_loopback(self.host)

    @property
    def tls(self) -> bool:
        """Whether the service itself serves HTTPS."""
        return self.tls_cert is not None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
