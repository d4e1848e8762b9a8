"""The base of every provider: :class:`NodeProvider` (provision, list, attach, and garbage
collection by the ownership rules of :mod:`nodeprov.node.ownership`)."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Collection
from datetime import datetime
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

import anyio
import anyio.lowlevel
from pydantic import ValidationError

from ..errors import ConfigError, NodeGoneError, NodeprovError
from .config import GarbageReport, NodeConfig, NodeInfo, ProviderSettings, Requirement
from .handle import NodeHandle
from .ownership import OwnerCheck, abandoned, expired, is_node_id, owner_alive

__all__ = ["NodeProvider"]

logger = logging.getLogger("nodeprov")

SettingsT = TypeVar("SettingsT", bound=ProviderSettings)


class NodeProvider(ABC, Generic[SettingsT]):
    """Makes nodes on one platform.

    A provider class names itself (``name``), declares its settings model
    (``settings_model``), registers in the ``nodeprov.providers`` entry-point group, and
    implements :meth:`_provision`. Construct it with :func:`nodeprov.get_provider` or
    :meth:`from_settings`, which validate the settings.
    """

    name: ClassVar[str]
    settings_model: ClassVar[type[ProviderSettings]]
    on_this_host: ClassVar[bool] = False
    """Whether this provider's nodes are directories of this machine (the control plane's):
    no sandbox stands between a process on such a node and this host, and this machine's
    executables run there as they are."""

    def __init__(self, settings: SettingsT) -> None:
        self.settings = settings

    def unreachable_loopback(self) -> str | None:
        """Why this provider's nodes, as its settings make them, cannot reach this machine's
        127.0.0.1 (where the offline scripted models listen), with the setting that fixes it;
        None when they can, or when it cannot be told (a run then finds out). Quick, no I/O."""
        return None

    @classmethod
    def from_settings(cls, **raw: Any) -> Self:
        """Validate ``raw`` against :attr:`settings_model` and build the provider.

        Raises:
            ConfigError: a field is unknown, missing or invalid; the message names each.
        """
        try:
            settings = cls.settings_model.model_validate(raw)
        except ValidationError as error:
            allowed = ", ".join(cls.settings_model.model_fields) or "none"
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or 'settings'}: {err['msg']}" for err in error.errors()
            )
            raise ConfigError(
                f"invalid settings for provider {cls.name!r}: {problems} (fields: {allowed})"
            ) from None
        return cls(settings)  # type: ignore[arg-type]

    @classmethod
    def requirements(cls) -> list[Requirement]:
        """What this provider needs on the control plane, and whether each is present.

        Quick and side-effect free (it may look at PATH, files and environment, and
        must not call the platform). Used by ``nodeprov providers``.
        """
        return []

    def resolved_settings(self) -> SettingsT:
        """The settings with every default that comes from this process's environment made
        explicit (``DOCKER_HOST``, ``XDG_RUNTIME_DIR``, a kubeconfig's context, an AWS
        region): what a control plane stores with a run, so that another process in another
        environment (a reconcile, a resume) finds the same platform and the same nodes.
        Providers whose defaults depend on the environment override it; quick and side-effect
        free."""
        return self.settings

    async def probe(self) -> None:
        """Ask the platform, with these settings, whether nodes can be made; make nothing.

        Bounded by the caller (no deadline of its own). The default asks nothing: a
        provider whose platform can be reached without a call (the local host) is ready
        when its :meth:`requirements` are.

        Raises:
            ConfigError: the settings cannot work (a bad endpoint, unsupported options).
            ProviderError: the platform could not be reached or refused.
        """

    async def aclose(self) -> None:
        """Release what the provider holds (connections to a platform); nodes stay. A
        provider used again afterwards connects again. Idempotent; never raises.
        ``async with provider:`` calls it on exit."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def provision(self, config: NodeConfig | None = None) -> NodeHandle:
        """Create a node and wait until processes can be spawned on it.

        Cancellation-safe: if this is cancelled or fails half-way, whatever was created is
        removed before the exception propagates.

        Creates or fails: a node of ``config.node_id`` that exists already is adopted only
        when it carries ``config``'s provision mark (see :attr:`NodeConfig.provision_key`:
        this same provision, retried after it was cut off); any other is left exactly as it
        is, and this raises :class:`ProvisionError`.

        Raises:
            ProvisionError: the platform could not make the node, or a node of that id
                exists that this provisioning did not make.
            ConfigError: the config does not suit this provider.
            ProviderError: the platform failed otherwise.
        """
        config = config or NodeConfig()
        handle = await self._provision(config)
        try:
            await anyio.lowlevel.checkpoint()  # a cancellation that came at the very end
        except BaseException:
            await handle.destroy()
            raise
        logger.info("provisioned node %s (%s)", handle.node_id, self.name)
        return handle

    @abstractmethod
    async def _provision(self, config: NodeConfig) -> NodeHandle:
        """Create the node (provider hook); undo partial work on failure (see Rollback)."""

    @abstractmethod
    async def list_nodes(self) -> list[NodeInfo]:
        """Every node of this provider that exists on its platform, whoever made it.

        Raises:
            ProviderError: the platform could not be asked.
        """

    @abstractmethod
    async def attach(self, node_id: str) -> NodeHandle:
        """A handle on an existing node, made by this or another control-plane process.

        Raises:
            NodeGoneError: no such node exists.
            ProviderError: the platform could not be asked.
        """

    async def collect_garbage(
        self,
        *,
        now: datetime | None = None,
        dry_run: bool = False,
        alive: OwnerCheck = owner_alive,
        spare: Collection[str] = (),
        settle: float = 0.0,
    ) -> GarbageReport:
        """Destroy every node that is :func:`abandoned` (expired, or ``alive`` says its owner
        is gone). The node ids in ``spare`` (say, nodes a store holds for runs) are spared
        their owner's judgement, never their lifetime: every node ends at its expiry.

        Nodes of live owners are never touched before they expire. A node that vanishes
        meanwhile is skipped; a destroy that fails is reported in :attr:`GarbageReport.failed`
        and the others go on.
        With ``settle`` seconds, the nodes are listed again until no abandoned node has
        shown up for that long: a control plane killed mid-provision leaves requests that
        the platform still completes after its death.

        Raises:
            ProviderError: the platform could not be asked.
        """
        report = GarbageReport()
        done: set[str] = set()
        quiet_since = time.monotonic()
        while True:
            listed = await self.list_nodes()
            for info in listed:
                if not is_node_id(info.node_id) and info.node_id not in done:
                    done.add(info.node_id)
                    logger.warning("not reaping %r (%s): not a node id", info.node_id, self.name)
            found = [
                (info, reason)
                for info in listed
                if info.node_id not in done
                if (
                    reason := expired(info.labels, now)
                    if info.node_id in spare
                    else abandoned(info.labels, now, alive=alive)
                )
                is not None
            ]
            if found:
                quiet_since = time.monotonic()
            for info, reason in found:
                done.add(info.node_id)
                logger.info("reaping node %s (%s): %s", info.node_id, self.name, reason)
                if dry_run:
                    report.reaped.append(info)
                    continue
                try:
                    await (await self.attach(info.node_id)).destroy()
                except NodeGoneError:
                    continue
                except NodeprovError as error:
                    logger.warning("could not reap node %s (%s): %s", info.node_id, self.name, error)
                    report.failed.append((info, str(error)))
                    continue
                report.reaped.append(info)
            waited = time.monotonic() - quiet_since
            if dry_run or waited >= settle:
                return report
            await anyio.sleep(min(0.5, settle - waited))
