"""Nodes and the providers that make them: :class:`NodeConfig`, :class:`NodeHandle`,
:class:`NodeProvider`, :class:`ProviderSettings`.

A provider turns a platform (a local directory, Docker, a Codespace, EC2, an SSH host) into
one interface: ``provision(config) -> NodeHandle``; a handle spawns processes and destroys
the node. Provider code implements the underscore hooks (``_provision``, ``_spawn``,
``_destroy``); the public methods add what every provider must guarantee: idempotent,
shielded, bounded teardown, and no leftovers when a call is cancelled half-way.

One concern per module: :mod:`~nodeprov.node.ownership` (labels, owners, the reaping rules),
:mod:`~nodeprov.node.config` (the value types), :mod:`~nodeprov.node.state` (the handle's
lifecycle), :mod:`~nodeprov.node.handle`, :mod:`~nodeprov.node.files` (file transfer over
the exec channel), :mod:`~nodeprov.node.rollback` and :mod:`~nodeprov.node.provider`.
"""

from ..settings import secret_field
from .config import GarbageReport, NodeConfig, NodeInfo, ProviderSettings, Requirement
from .handle import NodeHandle
from .ownership import (
    LABEL_EXPIRES_AT,
    LABEL_NODE_ID,
    LABEL_OWNER,
    LABEL_PROVISION,
    LABEL_SESSION_ID,
    OwnerCheck,
    abandoned,
    default_owner,
    expired,
    is_node_id,
    owner_alive,
    pid_namespace,
    process_start_time,
)
from .provider import NodeProvider
from .rollback import Rollback
from .state import NODE_TRANSITIONS, NodeState

__all__ = [
    "LABEL_EXPIRES_AT",
    "LABEL_NODE_ID",
    "LABEL_OWNER",
    "LABEL_PROVISION",
    "LABEL_SESSION_ID",
    "NODE_TRANSITIONS",
    "GarbageReport",
    "NodeConfig",
    "NodeHandle",
    "NodeInfo",
    "NodeProvider",
    "NodeState",
    "OwnerCheck",
    "ProviderSettings",
    "Requirement",
    "Rollback",
    "abandoned",
    "default_owner",
    "expired",
    "is_node_id",
    "owner_alive",
    "pid_namespace",
    "process_start_time",
    "secret_field",
]
