"""nodeprov: provision nodes for AI coding agents and drive Claude Code on them.

The pieces: a provider (from :func:`get_provider`) provisions a :class:`NodeHandle`; the
handle spawns processes (:class:`SpawnOptions` -> :class:`SpawnedProcess`); the SDK bridge
:class:`nodeprov.claude.NodeTransport` runs the Claude Code CLI through such a spawn. The
library logs to the ``nodeprov`` logger and configures no handler.
"""

from .errors import (
    AgentError,
    AgentExitError,
    AgentOutputError,
    CommandNotFoundError,
    ConfigError,
    DeadlineError,
    NodeFileError,
    NodeFileNotFoundError,
    NodeGoneError,
    NodePathError,
    NodeprovError,
    ProviderError,
    ProviderNotFoundError,
    ProvisionError,
    SpawnError,
)
from .node import (
    LABEL_EXPIRES_AT,
    LABEL_NODE_ID,
    LABEL_OWNER,
    LABEL_SESSION_ID,
    NodeConfig,
    NodeHandle,
    NodeInfo,
    NodeProvider,
    ProviderSettings,
    Requirement,
    Rollback,
    abandoned,
    owner_alive,
    secret_field,
)
from .registry import get_provider, provider_class, provider_names
from .spawn import SpawnedProcess, SpawnFn, SpawnOptions, StopPolicy

__all__ = [
    "LABEL_EXPIRES_AT",
    "LABEL_NODE_ID",
    "LABEL_OWNER",
    "LABEL_SESSION_ID",
    "AgentError",
    "AgentExitError",
    "AgentOutputError",
    "CommandNotFoundError",
    "ConfigError",
    "DeadlineError",
    "NodeConfig",
    "NodeFileError",
    "NodeFileNotFoundError",
    "NodeGoneError",
    "NodeHandle",
    "NodeInfo",
    "NodePathError",
    "NodeProvider",
    "NodeprovError",
    "ProviderError",
    "ProviderNotFoundError",
    "ProviderSettings",
    "ProvisionError",
    "Requirement",
    "Rollback",
    "SpawnError",
    "SpawnFn",
    "SpawnOptions",
    "SpawnedProcess",
    "StopPolicy",
    "abandoned",
    "get_provider",
    "owner_alive",
    "provider_class",
    "provider_names",
    "secret_field",
]
