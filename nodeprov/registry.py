"""Finding providers: they register in the ``nodeprov.providers`` entry-point group.

A provider distribution declares, in its ``pyproject.toml``::

    [project.entry-points."nodeprov.providers"]
    docker = "nodeprov_docker:DockerProvider"

The core never imports a provider module; it loads the entry point by name on demand, so
a provider's third-party dependencies are needed only when that provider is used.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .errors import ConfigError, ProviderNotFoundError
from .node import NodeProvider

__all__ = ["ENTRY_POINT_GROUP", "get_provider", "provider_class", "provider_names"]

ENTRY_POINT_GROUP = "nodeprov.providers"


# Loaded classes, by name: scanning the installed distributions' entry points takes
# milliseconds, and an orchestrator asks for a provider on every run.
_loaded: dict[str, type[NodeProvider[Any]]] = {}


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def provider_names() -> list[str]:
    """Names of the installed providers, sorted. Imports none of them."""
    return sorted(_entry_points())


def provider_class(name: str) -> type[NodeProvider[Any]]:
    """Load the provider class registered as ``name`` (once per process).

    Raises:
        ProviderNotFoundError: nothing is registered under ``name``.
        ConfigError: the entry point does not load (say, a missing dependency) or does not
            name a :class:`~nodeprov.node.NodeProvider` subclass.
    """
    if (cached := _loaded.get(name)) is not None:
        return cached
    entry_point = _entry_points().get(name)
    if entry_point is None:
        installed = ", ".join(provider_names()) or "none"
        raise ProviderNotFoundError(f"no provider named {name!r} (installed: {installed})")
    try:
        loaded = entry_point.load()
    except Exception as error:  # an entry point can fail in any way while importing
        raise ConfigError(f"provider {name!r} failed to load: {error}") from error
    if not (isinstance(loaded, type) and issubclass(loaded, NodeProvider)):
        raise ConfigError(f"entry point {entry_point.value!r} is not a NodeProvider class")
    _loaded[name] = loaded
    return loaded


def get_provider(name: str, /, **settings: Any) -> NodeProvider[Any]:
    """Build the provider ``name`` with ``settings``, validated by its settings model.

    Raises:
        ProviderNotFoundError: nothing is registered under ``name``.
        ConfigError: the provider does not load, or a setting is unknown or invalid.
    """
    return provider_class(name).from_settings(**settings)
