"""Finding providers and agents: they register in the ``nodeprov.providers`` and
``nodeprov.agents`` entry-point groups.

A provider distribution declares, in its ``pyproject.toml``::

    [project.entry-points."nodeprov.providers"]
    docker = "nodeprov_docker:DockerProvider"

The core never imports a provider or agent module; it loads the entry point by name on
demand, so their third-party dependencies are needed only when they are used. Test doubles
(the fake provider) are not entry points: a test process registers them with
:func:`register_provider` (nodeprov's pytest plugin does), so users never see them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .agents import Agent, AgentOptions
from .errors import ConfigError, ProviderNotFoundError
from .node import NodeProvider

__all__ = [
    "AGENT_ENTRY_POINT_GROUP",
    "DEFAULT_AGENT",
    "ENTRY_POINT_GROUP",
    "agent_class",
    "agent_names",
    "get_agent",
    "get_provider",
    "provider_class",
    "provider_names",
    "register_provider",
    "route_model",
]

ENTRY_POINT_GROUP = "nodeprov.providers"
AGENT_ENTRY_POINT_GROUP = "nodeprov.agents"
DEFAULT_AGENT = "claude"
"""The agent of a model no installed agent claims."""

# Loaded classes, by group and name: scanning the installed distributions' entry points
# takes milliseconds, and an orchestrator asks on every run.
_loaded: dict[tuple[str, str], Any] = {}


# Registered in this process only (test doubles), beside the installed entry points.
_registered: dict[tuple[str, str], Any] = {}


def _entry_points(group: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=group)}


def register_provider(name: str, cls: type[NodeProvider[Any]]) -> None:
    """Make ``cls`` provider ``name`` in this process only, beside the installed entry points:
    how a test registers a test double (nodeprov's pytest plugin registers the fake
    provider), which a user's CLI therefore never loads.

    Raises:
        ConfigError: an installed provider has that name, or ``cls`` is no provider class.
    """
    if name in _entry_points(ENTRY_POINT_GROUP):
        raise ConfigError(f"an installed provider is named {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, NodeProvider)):
        raise ConfigError(f"{cls!r} is not a NodeProvider class")
    _registered[ENTRY_POINT_GROUP, name] = cls


def _load(group: str, name: str, base: type, what: str) -> Any:
    if (cached := _loaded.get((group, name)) or _registered.get((group, name))) is not None:
        return cached
    entry_point = _entry_points(group).get(name)
    if entry_point is None:
        installed = (
            ", ".join(sorted({*_entry_points(group), *(n for g, n in _registered if g == group)})) or "none"
        )
        raise ProviderNotFoundError(f"no {what} named {name!r} (installed: {installed})")
    try:
        loaded = entry_point.load()
    except Exception as error:  # an entry point can fail in any way while importing
        raise ConfigError(f"{what} {name!r} failed to load: {error}") from error
    if not (isinstance(loaded, type) and issubclass(loaded, base)):
        raise ConfigError(f"entry point {entry_point.value!r} is not a {base.__name__} class")
    _loaded[group, name] = loaded
    return loaded


def provider_names() -> list[str]:
    """Names of the installed providers (and of those registered in this process), sorted.
    Imports none of them."""
    registered = {name for group, name in _registered if group == ENTRY_POINT_GROUP}
    return sorted({*_entry_points(ENTRY_POINT_GROUP), *registered})


def provider_class(name: str) -> type[NodeProvider[Any]]:
    """Load the provider class registered as ``name`` (once per process).

    Raises:
        ProviderNotFoundError: nothing is registered under ``name``.
        ConfigError: the entry point does not load (say, a missing dependency) or does not
            name a :class:`~nodeprov.node.NodeProvider` subclass.
    """
    loaded: type[NodeProvider[Any]] = _load(ENTRY_POINT_GROUP, name, NodeProvider, "provider")
    return loaded


def get_provider(name: str, /, **settings: Any) -> NodeProvider[Any]:
    """Build the provider ``name`` with ``settings``, validated by its settings model.

    Raises:
        ProviderNotFoundError: nothing is registered under ``name``.
        ConfigError: the provider does not load, or a setting is unknown or invalid.
    """
    return provider_class(name).from_settings(**settings)


def agent_names() -> list[str]:
    """Names of the installed agents, sorted. Imports none of them."""
    return sorted(_entry_points(AGENT_ENTRY_POINT_GROUP))


def agent_class(name: str) -> type[Agent[Any]]:
    """Load the agent class registered as ``name`` (once per process).

    Raises:
        ProviderNotFoundError: nothing is registered under ``name``.
        ConfigError: the entry point does not load or does not name an
            :class:`~nodeprov.agents.Agent` subclass.
    """
    loaded: type[Agent[Any]] = _load(AGENT_ENTRY_POINT_GROUP, name, Agent, "agent")
    return loaded


def get_agent(name: str, options: AgentOptions | Mapping[str, Any] | None = None) -> Agent[Any]:
    """The agent ``name`` with ``options``, validated by its options model.

    Raises:
        ProviderNotFoundError, ConfigError: as :func:`agent_class`, or an invalid option.
    """
    return agent_class(name).from_options(options)


def route_model(model: str | None, agent: str | None = None) -> str:
    """The agent that runs ``model``: ``agent`` when given; else the installed agent one of
    whose ``model_patterns`` matches the whole name (``claude-*``, ``opus``, ``sonnet`` and
    ``haiku`` go to claude; ``gpt-*``, ``o1``...``o4`` and ``codex-*`` to codex); else
    :data:`DEFAULT_AGENT`.

    Raises:
        ProviderNotFoundError, ConfigError: as :func:`agent_class` (an agent that fails to
            load is an error, not a silent miss).
    """
    if agent is not None:
        return agent
    if model:
        for name in agent_names():
            if any(re.fullmatch(pattern, model) for pattern in agent_class(name).model_patterns):
                return name
    return DEFAULT_AGENT
