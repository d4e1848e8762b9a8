"""Finding providers: they register in the ``nodeprov.providers`` entry-point group.

A provider distribution declares, in its ``pyproject.toml``::

    [project.entry-points."nodeprov.providers"]
    docker = "nodeprov_docker:DockerProvider"

The core never imports a provider module; it loads the entry point by name on demand, so a
provider's third-party dependencies are needed only when it is used. Test doubles (the fake
provider) are not entry points: a test process registers them with
:func:`register_provider` (nodeprov's pytest plugin does), so users never see them. Agents
have a registry of their own (:mod:`nodeprov.agents.registry`): finding a provider loads no
agent.
"""

from __future__ import annotations

from typing import Any

from . import _plugins
from .errors import ConfigError, ProviderNotFoundError
from .node import NodeProvider

__all__ = [
    "ENTRY_POINT_GROUP",
    "get_provider",
    "provider_class",
    "provider_names",
    "register_provider",
]

ENTRY_POINT_GROUP = "nodeprov.providers"


def register_provider(name: str, cls: type[NodeProvider[Any]]) -> None:
    """Make ``cls`` provider ``name`` in this process only, beside the installed entry points:
    how a test registers a test double (nodeprov's pytest plugin registers the fake
    provider), which a user's CLI therefore never loads.

    Raises:
        ConfigError: an installed provider has that name, or ``cls`` is no provider class.
    """
    if not (isinstance(cls, type) and issubclass(cls, NodeProvider)):
        raise ConfigError(f"{cls!r} is not a NodeProvider class")
    _plugins.register(ENTRY_POINT_GROUP, name, cls)


def provider_names() -> list[str]:
    """Names of the installed providers (and of those registered in this process), sorted.
    Imports none of them."""
    return _plugins.installed(ENTRY_POINT_GROUP)


def provider_class(name: str) -> type[NodeProvider[Any]]:
    """Load the provider class registered as ``name`` (once per process).

    Raises:
        ProviderNotFoundError: nothing is registered under ``name``.
        ConfigError: the entry point does not load (say, a missing dependency) or does not
            name a :class:`~nodeprov.node.NodeProvider` subclass.
    """
    loaded: type[NodeProvider[Any]] = _plugins.load(
        ENTRY_POINT_GROUP, name, NodeProvider, "provider", ProviderNotFoundError
    )
    return loaded


def get_provider(name: str, /, **settings: Any) -> NodeProvider[Any]:
    """Build the provider ``name`` with ``settings``, validated by its settings model.

    Raises:
        ProviderNotFoundError: nothing is registered under ``name``.
        ConfigError: the provider does not load, or a setting is unknown or invalid.
    """
    return provider_class(name).from_settings(**settings)
