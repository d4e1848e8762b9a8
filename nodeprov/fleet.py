"""The installed providers as one fleet: providers made with settings from the environment
(``NODEPROV_<PROVIDER>_<FIELD>``), whether each is ready, and nodes found across them.

What a command over "every provider" needs, whoever asks (the CLI, a service): a provider
that is not set up here is skipped with a note, one that could not be asked is a failure,
and the others go on (see :meth:`Fleet.across`). A :class:`Fleet` makes each provider once
per name and settings and closes their connections when it closes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import anyio.to_thread

from .errors import ConfigError, NodeGoneError, NodeprovError, ProviderError, first_line
from .node import NodeHandle, NodeInfo, NodeProvider, Requirement
from .registry import provider_class, provider_names

__all__ = [
    "Fleet",
    "Readiness",
    "check_image",
    "loaded_provider_class",
    "make_provider",
    "provider_settings_from_env",
    "readiness",
    "settings_from_env",
]

logger = logging.getLogger("nodeprov.fleet")

T = TypeVar("T")

# One provider import at a time, in whichever worker thread: two threads importing modules
# that import each other (providers share dependencies) can each see the other's half made.
_LOADING = threading.Lock()


def settings_from_env(
    name: str, given: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``given`` laid over the settings of provider ``name`` found in ``environ`` (default:
    this process's environment): a variable ``NODEPROV_<NAME>_<FIELD>``
    (``NODEPROV_SSH_HOST``, ``NODEPROV_SSH_KEY_FILES``), its value as JSON when it parses.
    Secrets (an ``env`` setting) are best given this way: not in argv.

    Raises:
        ProviderNotFoundError, ConfigError: as :func:`~nodeprov.registry.provider_class`
            (it loads the provider's class to learn its fields).
    """
    environ = os.environ if environ is None else environ
    prefix = _env_prefix(name)
    found: dict[str, Any] = {}
    for field in provider_class(name).settings_model.model_fields:
        raw = environ.get(prefix + field.upper())
        if raw is not None:
            try:
                found[field] = json.loads(raw)
            except ValueError:
                found[field] = raw
    return found | dict(given or {})


def provider_settings_from_env(
    provider: str | None = None,
    given: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per installed provider, its settings found in ``environ`` (default: this process's
    environment; see :func:`settings_from_env`), with ``given`` laid over those of
    ``provider``: a control plane's settings (see :class:`~nodeprov.runs.Orchestrator`'s
    ``provider_settings``), laid under a new run's own, and their secrets (an SSH key's
    passphrase, a token) over what runs and pools stored. A provider with nothing in
    ``environ`` is left out (it is not even loaded), and so is one that does not load here
    (its runs' nodes cannot be reached from here either).

    Raises:
        ConfigError: ``given`` without a ``provider`` to take them.
    """
    if provider is None:
        _refuse_unnamed(given)
    environ = os.environ if environ is None else environ
    found: dict[str, dict[str, Any]] = {}
    for name in provider_names():
        if name != provider and not any(key.startswith(_env_prefix(name)) for key in environ):
            continue  # nothing set for it here: not worth importing it
        try:
            settings = settings_from_env(name, given if name == provider else None, environ)
        except NodeprovError:
            continue
        if settings:
            found[name] = settings
    return found


def check_image(provider: NodeProvider[Any]) -> None:
    """A provider that declares an image needs one: refused before anything is recorded or made.

    Raises:
        ConfigError: its image is missing.
    """
    if "image" in type(provider.settings).model_fields and getattr(provider.settings, "image", None) is None:
        raise ConfigError(f"the {provider.name} provider needs an image (setting 'image')")


def make_provider(name: str, settings: Mapping[str, Any]) -> NodeProvider[Any]:
    """The provider ``name`` with validated ``settings`` laid over those of this process's
    environment (see :func:`settings_from_env`); one that declares an image needs one
    (checked here, before anything is recorded or made). Loads the provider's class in this
    thread: from an event loop that must not stall, load it first in a worker thread.

    Raises:
        ProviderNotFoundError: nothing is registered under ``name``.
        ConfigError: the provider does not load, a setting is unknown or invalid, or the
            image it needs is missing.
    """
    provider = provider_class(name).from_settings(**settings_from_env(name, settings))
    check_image(provider)
    return provider


@dataclass(frozen=True)
class Readiness:
    """Whether provider ``name`` can make nodes here: its ``requirements`` (tools,
    credentials) and, when they are met, its platform's answer to a probe. ``error`` says
    why it cannot ("" when it is ready, and when only a requirement is missing)."""

    name: str
    ready: bool
    error: str
    requirements: tuple[Requirement, ...]

    def as_json(self) -> dict[str, Any]:
        """The readiness as one JSON object (what ``nodeprov providers --json`` prints)."""
        return {
            "name": self.name,
            "ready": self.ready,
            "error": self.error,
            "requirements": [dataclasses.asdict(requirement) for requirement in self.requirements],
        }


async def readiness(
    name: str, given: Mapping[str, Any] | None = None, *, probe_timeout: float = 10.0
) -> Readiness:
    """Whether provider ``name`` is ready: its requirements, then, when they are met, a
    probe of its platform with ``given`` laid over its settings from this process's
    environment (see :func:`settings_from_env`). A platform that gives no answer within
    ``probe_timeout`` seconds (a hung engine, an API server) is not ready.

    A provider that does not load, is not configured or does not answer is not ready, and
    :attr:`Readiness.error` says why: none of these raises.
    """
    try:
        cls, requirements = await anyio.to_thread.run_sync(_class_and_requirements, name)
    except NodeprovError as error:
        return Readiness(name, False, str(error), ())
    if not all(requirement.ok for requirement in requirements):
        return Readiness(name, False, "", requirements)
    try:
        provider = cls.from_settings(**settings_from_env(name, given))
    except ConfigError as error:
        return Readiness(name, False, f"not configured: {error}", requirements)
    try:
        with anyio.fail_after(probe_timeout):
            async with provider:
                await provider.probe()
    except NodeprovError as error:
        return Readiness(name, False, f"not ready: {first_line(error)}", requirements)
    except TimeoutError:
        return Readiness(name, False, f"not ready: no answer within {probe_timeout:g} s", requirements)
    return Readiness(name, True, "", requirements)


class Fleet:
    """The installed providers, each made once per name and settings: the settings of this
    environment (see :func:`settings_from_env`) with the given ones laid over. ``aclose()``
    (or leaving ``async with``) closes their connections; their nodes stay.

    A provider's class is loaded in a worker thread the first time it is asked for: its first
    import is a stall the event loop must not take (a control plane's lease heartbeat and
    every run's relay share that loop).

    With a provider named, a method acts on that provider alone and its errors propagate;
    with none, it acts on every provider this environment configures, skips those it does
    not (:meth:`configured`) and goes on past one that fails (:meth:`across`).
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        """``environ``: where the providers' settings are read (``NODEPROV_<PROVIDER>_*``);
        default: this process's environment. ``{}`` reads none: providers get exactly the
        settings they are given."""
        self._environ = os.environ if environ is None else environ
        self._providers: dict[str, NodeProvider[Any]] = {}

    async def provider(self, name: str, settings: Mapping[str, Any] | None = None) -> NodeProvider[Any]:
        """The provider ``name`` with ``settings`` laid over its environment's, made the first
        time these settings are asked for (settings equal as JSON are the same) and the same
        object after that, until :meth:`aclose`.

        Raises:
            ProviderNotFoundError: nothing is registered under ``name``.
            ConfigError: the provider does not load, or a setting is unknown or invalid.
        """
        given = dict(settings or {})
        key = f"{name}\0{json.dumps(given, sort_keys=True, default=str)}"
        if key not in self._providers:
            cls = await loaded_provider_class(name)
            if key not in self._providers:  # else another task made it while this one waited
                self._providers[key] = cls.from_settings(**settings_from_env(name, given, self._environ))
        return self._providers[key]

    async def configured(self) -> tuple[list[NodeProvider[Any]], list[str]]:
        """Every installed provider that its environment's settings configure, in name
        order, and a note for each one skipped (``"NAME: skipped, not set up here (why)"``):
        one that needs settings (ssh's host) until they are set, one that does not load."""
        made: list[NodeProvider[Any]] = []
        skipped: list[str] = []
        for name in await anyio.to_thread.run_sync(provider_names):
            try:
                made.append(await self.provider(name))
            except NodeprovError as error:
                logger.info("provider %s is not set up here: skipped", name)
                skipped.append(_skipped(name, error))
        return made, skipped

    async def find(
        self, node_id: str, name: str | None = None, settings: Mapping[str, Any] | None = None
    ) -> NodeHandle:
        """A handle on node ``node_id``, attached from provider ``name`` with ``settings``,
        or from whichever configured provider has it (asked in name order; one that fails
        to answer is passed over).

        Raises:
            NodeGoneError: no provider asked has the node (``"no node X"``, or ``"no node X
                in provider 'P'"`` with a name).
            ProviderNotFoundError, ProviderError, ConfigError: with a name, that provider
                does not load, is not configured, or could not be asked. With no name:
                ``settings`` were given (they would be no provider's).
        """
        if name is not None:
            provider = await self.provider(name, settings)
            with suppress(NodeGoneError):
                return await provider.attach(node_id)
            raise NodeGoneError(f"no node {node_id} in provider {name!r}")
        _refuse_unnamed(settings)
        for provider in (await self.configured())[0]:
            with suppress(NodeGoneError, ProviderError, ConfigError):
                return await provider.attach(node_id)
        raise NodeGoneError(f"no node {node_id}")

    async def across(
        self,
        act: Callable[[NodeProvider[Any]], Awaitable[tuple[list[T], list[str]]]],
        name: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> tuple[list[T], list[str], list[str]]:
        """``act`` on provider ``name`` with ``settings``, or on every configured provider in
        turn: what it found, notes, and failures, in provider order. ``act`` returns what it
        found on one provider and the failures it met there (one line each). Over every
        provider, one that ``act`` finds not set up here (a :class:`ConfigError`: no
        region, no kubeconfig, logged out) is a note, like one :meth:`configured` skips;
        one that could not be asked (any other :class:`NodeprovError`) is a failure
        (``"NAME: why"``); the others go on.

        Raises:
            ProviderNotFoundError, ConfigError, NodeprovError: with a name, that provider
                does not load or is not configured, or ``act`` raised. With no name:
                ``settings`` were given (they would be no provider's).
        """
        if name is not None:
            found, failed = await act(await self.provider(name, settings))
            return found, [], failed
        _refuse_unnamed(settings)
        providers, notes = await self.configured()
        found, failed = [], []
        for provider in providers:
            try:
                found_there, failed_there = await act(provider)
            except ConfigError as error:
                notes.append(_skipped(provider.name, error))
            except NodeprovError as error:
                failed.append(f"{provider.name}: {first_line(error)}")
            else:
                found += found_there
                failed += failed_there
        return found, notes, failed

    async def list_nodes(
        self, name: str | None = None, settings: Mapping[str, Any] | None = None
    ) -> tuple[list[NodeInfo], list[str], list[str]]:
        """The nodes of provider ``name`` with ``settings``, or of every configured
        provider: the nodes, notes (providers skipped) and failures (providers that could
        not be asked), as :meth:`across` sorts them.

        Raises:
            ProviderNotFoundError, ConfigError, ProviderError: with a name, that provider
                does not load, is not configured, or could not be asked. With no name:
                ``settings`` were given.
        """

        async def nodes_of(provider: NodeProvider[Any]) -> tuple[list[NodeInfo], list[str]]:
            return await provider.list_nodes(), []

        return await self.across(nodes_of, name, settings)

    async def aclose(self) -> None:
        """Close the providers' connections (their nodes stay) and forget them: a provider
        asked for afterwards is made anew. Idempotent, shielded from cancellation; never
        raises."""
        providers, self._providers = list(self._providers.values()), {}
        with anyio.CancelScope(shield=True):
            for provider in providers:
                await provider.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def loaded_provider_class(name: str) -> type[NodeProvider[Any]]:
    """The provider class ``name`` (see :func:`~nodeprov.registry.provider_class`), loaded in
    a worker thread: the first load imports the provider and its platform's library.

    Raises:
        ProviderNotFoundError: nothing is registered under ``name``.
        ConfigError: the provider does not load.
    """
    return await anyio.to_thread.run_sync(_load, name)


def _load(name: str) -> type[NodeProvider[Any]]:
    """The provider class ``name`` (see :func:`~nodeprov.registry.provider_class`), loaded
    in this worker thread while no other thread loads one."""
    with _LOADING:
        return provider_class(name)


def _class_and_requirements(name: str) -> tuple[type[NodeProvider[Any]], tuple[Requirement, ...]]:
    cls = _load(name)
    return cls, tuple(cls.requirements())


def _refuse_unnamed(settings: Mapping[str, Any] | None) -> None:
    if settings:
        raise ConfigError("settings were given without a provider to take them")


def _skipped(name: str, error: NodeprovError) -> str:
    return f"{name}: skipped, not set up here ({first_line(error)})"


def _env_prefix(provider: str) -> str:
    return f"NODEPROV_{provider.upper().replace('-', '_')}_"
