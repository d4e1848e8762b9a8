"""The Docker provider's settings: the engine, the image, limits, mounts, and what every exec gets."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from nodeprov.node import ProviderSettings, secret_field

__all__ = ["DockerMount", "DockerSettings"]


class DockerMount(BaseModel):
    """A mount of every node's container."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(description="Host path (bind) or volume name (volume).")
    target: str = Field(description="Path inside the container.")
    read_only: bool = Field(default=False, description="Mount read-only.")
    type: Literal["bind", "volume"] = Field(default="bind", description="Kind of mount.")


class DockerSettings(ProviderSettings):
    """Settings of the Docker provider."""

    # Not the engine, the network mode, mounts or the environment: the service's own host.
    caller_settings: ClassVar[frozenset[str]] = frozenset(
        {"image", "pull", "cpus", "memory", "user", "workdir", "ready_timeout", "eof_grace", "term_grace"}
    )

    image: str | None = Field(default=None, description="Image of every node; needed to provision.")
    docker_host: str | None = Field(
        default=None,
        description="Engine URL, unix:///path or tcp://host:port (TLS is not supported). "
        "Default: DOCKER_HOST, then the local socket.",
    )
    pull: Literal["missing", "always", "never"] = Field(
        default="missing", description="When to pull the image from its registry."
    )
    network_mode: str | None = Field(default=None, description="Network mode, e.g. 'host' or 'none'.")
    cpus: float | None = Field(default=None, gt=0, description="CPU limit, in CPUs.")
    memory: str | None = Field(default=None, description="Memory limit, e.g. '512m' or '2g'.")
    mounts: list[DockerMount] = Field(default_factory=list, description="Mounts of every node.")
    user: str | None = Field(default=None, description="User of the container and its processes.")
    workdir: str = Field(
        default="/workspace", description="Working directory in the container, made if missing."
    )
    env: dict[str, str] = secret_field(
        default_factory=dict,
        description="Environment of every process on the node; a secret: given to each exec, never "
        "part of the container's configuration, so the engine does not show it and it is not stored.",
    )
    ready_timeout: float = Field(default=60.0, gt=0, description="Seconds a node may take to be ready.")
    eof_grace: float = Field(default=5.0, ge=0, description="Seconds after stdin EOF before SIGTERM.")
    term_grace: float = Field(default=5.0, ge=0, description="Seconds after SIGTERM before SIGKILL.")
