"""Finding agents: they register in the ``nodeprov.agents`` entry-point group, as providers
do in theirs (:mod:`nodeprov.registry`)::

    [project.entry-points."nodeprov.agents"]
    claude = "nodeprov.agents.claude:ClaudeAgent"

Nothing outside an agent's own module names it: a model goes to the agent whose
``model_patterns`` claim it (:func:`route_model`), and what no agent claims to the agents
that declare themselves the ``fallback``.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from importlib import import_module
from typing import Any

import anyio.to_thread

from .. import _plugins
from ..errors import AgentNotFoundError
from ..scripted import SCRIPTED
from . import Agent, AgentOptions

__all__ = [
    "AGENT_ENTRY_POINT_GROUP",
    "SCRIPTED",
    "agent_class",
    "agent_names",
    "describe_agent",
    "fallback_agent",
    "get_agent",
    "import_soon",
    "imported",
    "on_model",
    "route_model",
]

AGENT_ENTRY_POINT_GROUP = "nodeprov.agents"

_imports_lock = threading.Lock()
_imports_started: set[str] = set()
_imports_done: set[str] = set()


def agent_names() -> list[str]:
    """Names of the installed agents, sorted. Imports none of them."""
    return _plugins.installed(AGENT_ENTRY_POINT_GROUP)


def agent_class(name: str) -> type[Agent[Any]]:
    """Load the agent class registered as ``name`` (once per process).

    Raises:
        AgentNotFoundError: nothing is registered under ``name``.
        ConfigError: the entry point does not load or does not name an
            :class:`~nodeprov.agents.Agent` subclass.
    """
    loaded: type[Agent[Any]] = _plugins.load(
        AGENT_ENTRY_POINT_GROUP, name, Agent, "agent", AgentNotFoundError
    )
    return loaded


def get_agent(name: str, options: AgentOptions | Mapping[str, Any] | None = None) -> Agent[Any]:
    """The agent ``name`` with ``options``, validated by its options model.

    Raises:
        AgentNotFoundError, ConfigError: as :func:`agent_class`, or an invalid option.
    """
    return agent_class(name).from_options(options)


def fallback_agent() -> str:
    """The agent of a model that no installed agent claims (or of no model): the first, by
    name, of the installed agents whose class sets :attr:`~nodeprov.agents.Agent.fallback`.

    Raises:
        AgentNotFoundError: no installed agent is a fallback.
        ConfigError: an agent fails to load (an error, not a silent miss).
    """
    for name in agent_names():
        if agent_class(name).fallback:
            return name
    raise AgentNotFoundError(
        f"no installed agent takes models it does not claim (installed: {', '.join(agent_names()) or 'none'})"
        ": name one"
    )


def route_model(model: str | None, agent: str | None = None) -> str:
    """The agent that runs ``model``: ``agent`` when given; else the installed agent one of
    whose ``model_patterns`` matches the whole name; else :func:`fallback_agent`.

    Raises:
        AgentNotFoundError: no agent claims the model and none is a fallback.
        ConfigError: an agent fails to load (an error, not a silent miss).
    """
    if agent is not None:
        return agent
    if model:
        for name in agent_names():
            if any(re.fullmatch(pattern, model) for pattern in agent_class(name).model_patterns):
                return name
    return fallback_agent()


def import_soon(cls: type[Agent[Any]]) -> None:
    """Start importing the agent's :attr:`~nodeprov.agents.Agent.slow_imports`, each in a
    thread of its own (once per process), and return at once: what a control plane calls as
    soon as it knows a run's agent, so the import overlaps the node's provisioning. A
    failure is left for :func:`imported` to raise."""
    with _imports_lock:
        for name in cls.slow_imports:
            if name not in _imports_started:
                _imports_started.add(name)
                importer = threading.Thread(target=_import_quietly, args=(name,), name=f"import {name}")
                importer.daemon = True  # a process that ends meanwhile does not wait for it
                importer.start()


async def imported(cls: type[Agent[Any]]) -> None:
    """Return once the agent's :attr:`~nodeprov.agents.Agent.slow_imports` are imported,
    waiting for those :func:`import_soon` started and importing the others, in a worker
    thread: never on the event loop.

    Raises:
        ImportError: a module does not import (or whatever its import raised).
    """
    if not _imports_done.issuperset(cls.slow_imports):
        await anyio.to_thread.run_sync(_import_all, cls.slow_imports)


def _import_all(names: tuple[str, ...]) -> None:
    for name in names:
        import_module(name)  # waits for another thread's import of the same module to end
        _imports_done.add(name)


def _import_quietly(name: str) -> None:
    with suppress(Exception):  # imported() imports it again, and raises
        _import_all((name,))


def describe_agent(name: str) -> dict[str, Any]:
    """What ``nodeprov agents --json`` and the service say of agent ``name``: whether it is the
    fallback, its CLI's name and where it is found on this machine (``None``: not found), the
    model names routed to it, its capabilities (images included) and its models.

    Raises:
        AgentNotFoundError, ConfigError: as :func:`agent_class`.
    """
    cls = agent_class(name)
    return {
        "name": name,
        "default": cls.fallback,
        "cli_name": cls.cli_name,
        "local_cli": cls.local_cli(),
        "model_patterns": list(cls.model_patterns),
        "capabilities": {**dataclasses.asdict(cls.capabilities), "images": cls.image_limits is not None},
        "models": [dataclasses.asdict(model) for model in cls.models],
    }


@asynccontextmanager
async def on_model(
    model: str | None, agent: str, prompt: str, options: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """``options`` (agent options, ``env`` among them) for running ``agent`` on ``model``: as
    they are, or, for :data:`SCRIPTED`, on the agent's offline scripted model playing its demo
    for ``prompt``, up while the context lasts (the model's options laid over, the caller's
    ``env`` over the model's). What ``nodeprov run --model scripted`` and the service use.

    Raises:
        ConfigError: the agent has no offline model (or does not load).
    """
    if model != SCRIPTED:
        yield dict(options)
        return
    async with agent_class(agent).offline(prompt) as model_options:
        env = {**model_options.get("env", {}), **options.get("env", {})}
        yield {**options, **model_options, "env": env}
