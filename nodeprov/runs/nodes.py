"""The providers of runs' nodes, made once per orchestrator, and destroying the nodes the
store records for a run."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from ..errors import NodeGoneError, NodeprovError
from ..fleet import Fleet, loaded_provider_class
from ..node import NodeProvider
from ..store import NodeRecord, NodeRecordState, RunRecord, Store

__all__ = ["Nodes", "not_given"]

logger = logging.getLogger("nodeprov.runs")


def not_given(secret_fields: str, given: Mapping[str, Any]) -> list[str]:
    """Which of ``secret_fields`` (a stored JSON list of a provider's secret settings) are not
    in ``given``, sorted."""
    return sorted(set(json.loads(secret_fields)) - set(given))


class Nodes:
    """Providers made once each, with what they were made with (a :class:`~nodeprov.fleet.Fleet`
    that reads no environment: a run's settings are all it is made with). This control
    plane's ``provider_settings`` (per provider) are laid under a new run's own, and their
    secrets over what a run or a pool stored."""

    def __init__(self, store: Store, provider_settings: dict[str, dict[str, Any]]) -> None:
        self._store = store
        self._provider_settings = provider_settings
        self._fleet = Fleet(environ={})

    async def provider(self, name: str, settings: dict[str, Any]) -> NodeProvider[Any]:
        """The provider ``name`` with ``settings``, made once (see :meth:`~nodeprov.fleet.Fleet.provider`).

        Raises:
            ProviderNotFoundError, ConfigError: the provider or its settings are wrong.
        """
        return await self._fleet.provider(name, settings)

    async def provider_for(self, record: RunRecord) -> NodeProvider[Any]:
        """The provider of a run, as it was started, with this control plane's settings for
        it (the secrets a run never stores) laid over.

        Raises:
            ProviderNotFoundError, ConfigError: the provider or its settings are wrong.
        """
        return await self.provider(record.node_provider, self.settings_for(record))

    def settings_for(self, record: RunRecord) -> dict[str, Any]:
        """A run's provider settings as stored, with this control plane's secrets laid over."""
        return self.laid_over(record.node_provider, record.node_settings, record.node_secret_fields)

    def defaults(self, provider: str) -> dict[str, Any]:
        """This control plane's settings for ``provider``: a new run's, under its own."""
        return dict(self._provider_settings.get(provider, {}))

    async def secrets(self, provider: str) -> dict[str, Any]:
        """This control plane's secret settings for ``provider`` (those its settings model
        declares secret), the ones stored runs and pools never hold.

        Raises:
            ProviderNotFoundError, ConfigError: the provider does not load.
        """
        given = self._provider_settings.get(provider, {})
        if not given:
            return {}
        secret = (await loaded_provider_class(provider)).settings_model.secret_fields()
        return {name: value for name, value in given.items() if name in secret}

    def not_given(self, provider: str, secret_fields: str) -> list[str]:
        """Which of ``secret_fields`` this control plane was not given for ``provider``."""
        return not_given(secret_fields, self._provider_settings.get(provider, {}))

    def laid_over(self, provider: str, stored: str, secret_fields: str) -> dict[str, Any]:
        """Provider settings as stored (JSON), with this control plane's values of their
        ``secret_fields`` (JSON list) laid over: the rest is the run's or the pool's own."""
        given = self._provider_settings.get(provider, {})
        return {
            **json.loads(stored),
            **{name: given[name] for name in json.loads(secret_fields) if name in given},
        }

    async def drop_kept(self, run_id: str) -> None:
        """Destroy the nodes kept by earlier pauses of ``run_id`` (its resume does not use
        them); one that cannot be destroyed is logged, for reconcile to retry."""
        stale = await self._store.nodes(states=(NodeRecordState.KEPT,), run_id=run_id)
        record = await self._store.run(run_id) if stale else None
        if record is not None:
            _, failed = await self.destroy(record, stale, "its run resumed without it")
            for node_id, why in failed:
                logger.warning("could not destroy node %s kept for run %s: %s", node_id, run_id, why)

    async def destroy(
        self, record: RunRecord, nodes: list[NodeRecord], why: str
    ) -> tuple[list[str], list[tuple[str, str]]]:
        """Destroy ``nodes`` of ``record``, each taken for destruction first (a
        compare-and-set from the state it was read in: one that moved meanwhile is skipped).
        Returns the nodes destroyed, and those that could not be (with why; they stay
        recorded).

        Raises:
            StoreError: the store failed.
        """
        destroyed: list[str] = []
        failed: list[tuple[str, str]] = []
        if not nodes:
            return destroyed, failed
        try:
            provider = await self.provider_for(record)
        except NodeprovError as error:
            failed.extend((node.id, str(error)) for node in nodes)
            return destroyed, failed
        for node in nodes:
            if node.state != NodeRecordState.DESTROYING and not await self._store.move_node(
                node.id, (node.state,), NodeRecordState.DESTROYING
            ):
                continue  # kept by a pause, or taken by a resume, since it was read
            try:
                with suppress(NodeGoneError):  # never made, or gone with its host
                    await (await provider.attach(node.id)).destroy()
                await self._store.set_node_state(node.id, NodeRecordState.DESTROYED)
                destroyed.append(node.id)
                logger.info("destroyed node %s of run %s: %s", node.id, record.id, why)
            except NodeprovError as error:
                logger.warning("could not destroy node %s of run %s: %s", node.id, record.id, error)
                failed.append((node.id, str(error)))
        return destroyed, failed

    async def aclose(self) -> None:
        """Close the providers' connections; their nodes stay."""
        await self._fleet.aclose()
