"""nodeprov: provision nodes for AI coding agents and drive them there.

The pieces: a provider (from :func:`get_provider`) provisions a :class:`NodeHandle`; the
handle spawns processes (:class:`SpawnOptions` -> :class:`SpawnedProcess`); an agent (from
:func:`get_agent`: Claude Code through the SDK bridge, the Codex CLI) runs its CLI through
such a spawn and speaks one message model (:mod:`nodeprov.agents`); the orchestrator
(:mod:`nodeprov.runs`) drives runs. The library logs to the ``nodeprov`` logger and
configures no handler.

The agent registry's functions are imported on first use: importing ``nodeprov`` (or
``nodeprov.errors``, as every provider does) loads no agent.
"""

from typing import TYPE_CHECKING, Any

from .errors import (
    AgentError,
    AgentExitError,
    AgentNotFoundError,
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
    RunStateError,
    SpawnError,
    StoreError,
    TokenError,
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
from .prompts import ImageBlock, Prompt, TextBlock
from .registry import get_provider, provider_class, provider_names
from .spawn import SpawnedProcess, SpawnFn, SpawnOptions, StopPolicy

if TYPE_CHECKING:
    from .agents.registry import agent_class, agent_names, get_agent, route_model

_AGENT_REGISTRY = ("agent_class", "agent_names", "get_agent", "route_model")


def __getattr__(name: str) -> Any:
    if name in _AGENT_REGISTRY:
        from .agents import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LABEL_EXPIRES_AT",
    "LABEL_NODE_ID",
    "LABEL_OWNER",
    "LABEL_SESSION_ID",
    "AgentError",
    "AgentExitError",
    "AgentNotFoundError",
    "AgentOutputError",
    "CommandNotFoundError",
    "ConfigError",
    "DeadlineError",
    "ImageBlock",
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
    "Prompt",
    "ProviderError",
    "ProviderNotFoundError",
    "ProviderSettings",
    "ProvisionError",
    "Requirement",
    "Rollback",
    "RunStateError",
    "SpawnError",
    "SpawnFn",
    "SpawnOptions",
    "SpawnedProcess",
    "StopPolicy",
    "StoreError",
    "TextBlock",
    "TokenError",
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
