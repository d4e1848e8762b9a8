"""nodeprov: provision nodes for AI coding agents and drive them there.

The pieces: a provider (from :func:`get_provider`) provisions a :class:`NodeHandle`; the
handle spawns processes (:class:`SpawnOptions` -> :class:`SpawnedProcess`); an agent (from
:func:`get_agent`: Claude Code through the SDK bridge, the Codex CLI) runs its CLI through
such a spawn and speaks one message model (:mod:`nodeprov.agents`); the orchestrator
(:mod:`nodeprov.runs`) drives runs. The library logs to the ``nodeprov`` logger and
configures no handler.

Only the exceptions are imported with the package: the rest on first use, so importing
``nodeprov`` (or ``nodeprov.errors``, as every provider does) loads no agent and no pydantic.
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

if TYPE_CHECKING:
    from .agents.registry import agent_class, agent_names, get_agent, route_model
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

# Loaded on first use, so that a command that needs none of them (``nodeprov --help``) loads
# neither pydantic nor the node model: each name and the module it comes from.
_LAZY = {
    **dict.fromkeys(("agent_class", "agent_names", "get_agent", "route_model"), ".agents.registry"),
    **dict.fromkeys(
        (
            "LABEL_EXPIRES_AT",
            "LABEL_NODE_ID",
            "LABEL_OWNER",
            "LABEL_SESSION_ID",
            "NodeConfig",
            "NodeHandle",
            "NodeInfo",
            "NodeProvider",
            "ProviderSettings",
            "Requirement",
            "Rollback",
            "abandoned",
            "owner_alive",
            "secret_field",
        ),
        ".node",
    ),
    **dict.fromkeys(("ImageBlock", "Prompt", "TextBlock"), ".prompts"),
    **dict.fromkeys(("get_provider", "provider_class", "provider_names"), ".registry"),
    **dict.fromkeys(("SpawnedProcess", "SpawnFn", "SpawnOptions", "StopPolicy"), ".spawn"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # once
        return value
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
