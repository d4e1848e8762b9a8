"""What a node is for and what a platform reports of it: :class:`NodeConfig` (identity,
ownership, lifetime, environment), :class:`ProviderSettings` (the base of every provider's
settings), :class:`NodeInfo`, :class:`Requirement` and :class:`GarbageReport`."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..settings import Settings
from ..spawn import SpawnOptions
from .ownership import (
    LABEL_EXPIRES_AT,
    LABEL_NODE_ID,
    LABEL_OWNER,
    LABEL_PROVISION,
    LABEL_SESSION_ID,
    default_owner,
    is_node_id,
)

__all__ = ["GarbageReport", "NodeConfig", "NodeInfo", "ProviderSettings", "Requirement"]


def _new_node_id() -> str:
    return f"np-{secrets.token_hex(6)}"


def _new_provision_key() -> str:
    return secrets.token_urlsafe(24)


_TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


class NodeConfig(BaseModel):
    """What a node is for: identity, ownership, lifetime and environment.

    Provider-independent; what a platform needs (an image, an instance type) is in that
    provider's settings. Unknown fields are rejected.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_id: str = Field(
        default_factory=_new_node_id,
        description="Identifier of the node, unique per provider: lowercase letters, digits "
        "and '-', at most 63 characters. Generated when not given.",
    )
    session_id: str | None = Field(
        default=None, description="The workflow session this node serves (label only)."
    )
    owner: str = Field(
        default_factory=default_owner,
        description="Who holds the node; a reaper removes nodes whose owner is gone. "
        "Defaults to this process (host:pid:start-time:pid-namespace); an orchestrator sets "
        "its lease ('lease:ID').",
    )
    ttl: timedelta | None = Field(
        default=timedelta(hours=24),
        description="Hard lifetime. The node is labelled with its expiry time, and reapers "
        "remove it after that even while its owner lives. None: no expiry.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels for every resource of the node; the 'nodeprov.' prefix is reserved.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment every process on the node starts with, under what each spawn asks for.",
    )
    workdir: str | None = Field(
        default=None,
        description="Working directory on the node. When it names an existing directory of "
        "the user's, destroy leaves it in place. Provider-chosen when not given.",
    )
    tools: dict[str, str] = Field(
        default_factory=dict,
        description="Executables of this machine (the control plane) to make available on the node, "
        "by name: name -> path here. The provider mounts them read-only (or uses them in place, or "
        "copies them) and reports where each lies on the node in NodeHandle.tool_paths.",
    )
    provision_key: str = Field(
        default_factory=_new_provision_key,
        repr=False,
        min_length=16,
        description="A secret of this provisioning, random by default. The node's resources carry "
        "its digest (label nodeprov.provision). A provision that finds a node of its id already "
        "there adopts it only if it carries this key's digest (an earlier attempt of the same "
        "provision, cut off between creating and returning: retry with the same config); any "
        "other node of that id is someone else's, and provision fails without touching it.",
    )

    @field_validator("node_id")
    @classmethod
    def _check_node_id(cls, value: str) -> str:
        if not is_node_id(value):
            raise ValueError("must be lowercase letters, digits and '-', at most 63 characters")
        return value

    @field_validator("tools")
    @classmethod
    def _check_tools(cls, value: dict[str, str]) -> dict[str, str]:
        for name, path in value.items():
            if not _TOOL_NAME.fullmatch(name) or not os.path.isabs(path):
                raise ValueError(f"tool {name!r}: a name of letters, digits, '.', '_', '-' and a full path")
        return value

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = [key for key in value if key.startswith("nodeprov.")]
        if reserved:
            raise ValueError(f"the 'nodeprov.' label prefix is reserved: {reserved}")
        return value

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        SpawnOptions("true", env=value)  # the same rules as for a spawn
        return value

    def template_json(self) -> str:
        """This config as JSON less what is each node's own (id, owner, session, provision
        key): what a store keeps to make more nodes like it (a run's resume on a fresh node,
        a warm pool's refills); each made from it gets those anew."""
        return self.model_dump_json(exclude={"node_id", "owner", "session_id", "provision_key"})

    @property
    def provision_mark(self) -> str:
        """The digest of :attr:`provision_key` that the node's resources carry (32 hex
        digits: a valid label value on every platform). It tells this provisioning's node
        from another's, and cannot be turned back into the key."""
        return hashlib.sha256(self.provision_key.encode()).hexdigest()[:32]

    def made_by_this(self, labels: Mapping[str, str]) -> bool:
        """Whether a node found with ``labels`` was made by this provisioning (an earlier
        attempt of it): the only node a provision may adopt."""
        return secrets.compare_digest(labels.get(LABEL_PROVISION, ""), self.provision_mark)

    def resource_labels(self, now: datetime | None = None) -> dict[str, str]:
        """The labels every resource of this node carries, the ``nodeprov.*`` ones included."""
        labels = {
            **self.labels,
            LABEL_NODE_ID: self.node_id,
            LABEL_OWNER: self.owner,
            LABEL_SESSION_ID: self.session_id or "",
            LABEL_PROVISION: self.provision_mark,
        }
        if self.ttl is not None:
            expires = (now or datetime.now(UTC)) + self.ttl
            labels[LABEL_EXPIRES_AT] = expires.isoformat(timespec="seconds")
        return labels


class ProviderSettings(Settings):
    """Base of every provider's settings model (see :class:`~nodeprov.settings.Settings`):
    frozen, unknown fields rejected, secrets declared with :func:`secret_field`; a control
    plane stores :meth:`storable` and asks for :meth:`secrets_set` again when it needs them
    (a resume).

    :attr:`caller_settings` names the settings a caller of a service (``nodeprov serve``) may
    set on its own: those that shape its node and nothing else (an image, resources,
    timeouts). Every other one is the operator's (the HTTP API refuses it unless its
    operator allows it): where the service connects and as whom (endpoints, hosts, ports,
    credentials, trust in host keys), what of the service's own machine a node reaches
    (paths, mounts, its environment, its network), and what costs money or escalates
    (instance types, privileged placement, security contexts). A provider declares it; the
    default is none."""

    caller_settings: ClassVar[frozenset[str]] = frozenset()


@dataclass(frozen=True)
class NodeInfo:
    """A node as its provider's platform reports it (see :meth:`NodeProvider.list_nodes`).

    ``state`` is the platform's own word ("running", "exited", ...).
    """

    node_id: str
    provider: str
    labels: Mapping[str, str]
    state: str


@dataclass(frozen=True)
class Requirement:
    """One thing a provider needs on the control plane (a tool, a credential) and whether
    it is there. ``detail`` says where it was found, or how to get it."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class GarbageReport:
    """What :meth:`NodeProvider.collect_garbage` did: the nodes it reaped (or, in a dry run,
    would reap), and those whose destroy failed, with why."""

    reaped: list[NodeInfo] = field(default_factory=list)
    failed: list[tuple[NodeInfo, str]] = field(default_factory=list)
