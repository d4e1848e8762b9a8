"""nodeprov: provision nodes for AI coding agents and drive them there.

The pieces: a provider (from :func:`get_provider`) provisions a :class:`NodeHandle`; the
handle spawns processes (:class:`SpawnOptions` -> :class:`SpawnedProcess`); an agent (from
:func:`get_agent`: Claude Code through the SDK bridge, the Codex CLI) runs its CLI through
such a spawn and speaks one message model (:mod:`nodeprov.agents`); the orchestrator
(:mod:`nodeprov.runs`) drives runs. The library logs to the ``nodeprov`` logger and
configures no handler.
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
    NodeSuspendedError,
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
from .registry import (
    agent_class,
    agent_names,
    get_agent,
    get_provider,
    provider_class,
    provider_names,
    route_model,
)
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
    "NodeSuspendedError",
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
    "agent_class",
    "agent_names",
    "get_agent",
    "get_provider",
    "owner_alive",
    "provider_class",
    "provider_names",
    "route_model",
    "secret_field",
]
