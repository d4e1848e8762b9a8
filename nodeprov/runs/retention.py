"""The retention policy: how long what is over stays in the store.

A run nobody drives (paused, finished or failed) and untouched for the retention period is
deleted with everything it owns (:mod:`nodeprov.store.retention` says what), once its nodes
are gone. A paused run is one too: a resume a month later is not what a store is kept for,
and its kept node expired long before. Any control plane sharing the store prunes, at most
once an hour between them all (:func:`prune_if_due`); ``nodeprov prune`` prunes now.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import anyio

from ..errors import ConfigError, first_line
from ..store import PruneReport, Store
from .state import LIVE_STATES, RunState

__all__ = [
    "DEFAULT_RETENTION",
    "PRUNE_EVERY",
    "check_retention",
    "parse_age",
    "prune",
    "prune_forever",
    "prune_if_due",
]

logger = logging.getLogger("nodeprov.runs")

DEFAULT_RETENTION = 30 * 86400.0
"""Seconds a run that is over stays in the store by default (30 days)."""

PRUNE_EVERY = 3600.0
"""Seconds between two prunes of one store, whoever does them."""

_OVER = tuple(state for state in RunState if state not in LIVE_STATES)
_FIRST_LOOK = 5.0  # seconds after a control plane starts (a short-lived one need not prune)
_LOOK_EVERY = 600.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> float:
    """Seconds, from ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a plain number of seconds.

    Raises:
        ConfigError: not an age.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if match is None:
        raise ConfigError(f"not an age: {text!r} (say 30d, 12h, 90m, or seconds)")
    return float(match[1]) * _UNITS.get(match[2] or "s", 1)


async def prune(store: Store, older_than: float, *, dry_run: bool = False) -> PruneReport:
    """Delete the runs over and untouched for ``older_than`` seconds, with all they own, then
    what no run names; compact the dead leases. Returns what went (with ``dry_run``: what
    would go, and nothing goes).

    Raises:
        ConfigError: ``older_than`` is negative or not finite.
        StoreError: the store failed.
    """
    if not (math.isfinite(older_than) and older_than >= 0):
        raise ConfigError(f"runs are pruned by an age in seconds, zero or more, not {older_than}")
    before = (datetime.now(UTC) - timedelta(seconds=older_than)).isoformat(timespec="microseconds")
    report = await store.retention.prune(before=before, states=_OVER, dry_run=dry_run)
    if not dry_run:
        while await store.leases.compact(LIVE_STATES):
            pass
    return report


async def prune_if_due(store: Store, retention: float) -> PruneReport | None:
    """:func:`prune` with ``retention``, if no control plane sharing the store did in the last
    :data:`PRUNE_EVERY` seconds. Returns what went, ``None`` when it was not due.

    Raises:
        StoreError: the store failed.
    """
    if not await store.retention.due(PRUNE_EVERY):
        return None
    report = await prune(store, retention)
    if report.runs or report.images or report.pool_nodes:
        logger.info("pruned the store: %s", ", ".join(f"{k} {v}" for k, v in report.as_json().items() if v))
    return report


async def prune_forever(
    store: Store, retention: float, collect: Callable[[], Awaitable[int]] | None = None
) -> None:
    """Prune ``store`` with ``retention`` whenever it is due, as a control plane does for as
    long as it runs, and then ``collect`` (the objects of its checkpoints no checkpoint names
    any more); a failure is logged, and tried again at the next look."""
    await anyio.sleep(_FIRST_LOOK)
    while True:
        try:
            pruned = await prune_if_due(store, retention) is not None
            if pruned and collect is not None and (collected := await collect()):
                logger.info("deleted %d objects of checkpoints no checkpoint names", collected)
        except Exception as error:  # noqa: BLE001 - retention tries again later
            logger.warning("pruning the store failed; trying again later: %s", first_line(error))
        await anyio.sleep(_LOOK_EVERY)


def check_retention(retention: float | None) -> float | None:
    """``retention``, if it is seconds (zero or more) or None.

    Raises:
        ConfigError: it is negative or not finite.
    """
    if retention is not None and not (math.isfinite(retention) and retention >= 0):
        raise ConfigError(f"retention must be seconds, zero or more, or None, not {retention!r}")
    return retention
