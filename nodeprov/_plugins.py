"""Loading classes registered under an entry-point group, once per process: what the provider
registry (:mod:`nodeprov.registry`) and the agent registry (:mod:`nodeprov.agents.registry`)
share. Neither imports the other's classes."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .errors import ConfigError

__all__ = ["installed", "load", "register"]

# The installed entry points, by group, and the loaded classes, by group and name: scanning
# the installed distributions' entry points takes milliseconds, and an orchestrator asks on
# every run (which agent takes a model, which is the fallback). Once per process: a
# distribution installed while it runs is seen by the next one.
_scanned: dict[str, dict[str, EntryPoint]] = {}
_loaded: dict[tuple[str, str], Any] = {}

# Registered in this process only (test doubles), beside the installed entry points.
_registered: dict[tuple[str, str], Any] = {}


def _entry_points(group: str) -> dict[str, EntryPoint]:
    if (found := _scanned.get(group)) is None:
        found = _scanned[group] = {ep.name: ep for ep in entry_points(group=group)}
    return found


def installed(group: str) -> list[str]:
    """The names registered in ``group``, installed or in this process, sorted. Imports none."""
    return sorted({*_entry_points(group), *(name for g, name in _registered if g == group)})


def register(group: str, name: str, cls: type) -> None:
    """Make ``cls`` the class ``name`` of ``group`` in this process only.

    Raises:
        ConfigError: an installed entry point of ``group`` has that name.
    """
    if name in _entry_points(group):
        raise ConfigError(f"an installed {group} entry point is named {name!r}")
    _registered[group, name] = cls


def load(group: str, name: str, base: type, what: str, missing: type[ConfigError]) -> Any:
    """The class registered as ``name`` in ``group`` (a subclass of ``base``; ``what`` names
    it in errors).

    Raises:
        ConfigError: of type ``missing`` when nothing is registered under ``name``; a plain
            one when the entry point does not load or names no ``base`` subclass.
    """
    if (cached := _loaded.get((group, name)) or _registered.get((group, name))) is not None:
        return cached
    entry_point = _entry_points(group).get(name)
    if entry_point is None:
        raise missing(f"no {what} named {name!r} (installed: {', '.join(installed(group)) or 'none'})")
    try:
        loaded = entry_point.load()
    except Exception as error:  # an entry point can fail in any way while importing
        raise ConfigError(f"{what} {name!r} failed to load: {error}") from error
    if not (isinstance(loaded, type) and issubclass(loaded, base)):
        raise ConfigError(f"entry point {entry_point.value!r} is not a {base.__name__} class")
    _loaded[group, name] = loaded
    return loaded
