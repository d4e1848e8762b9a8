"""What the parts of one orchestrator share (:class:`ControlPlane`): the parts (the driver,
the launcher, pause requests, take-overs, reconcile, the pool keeper) reach the store, the
lease, the providers, the journal, the runs driven here and the orchestrator's task group
through it, and each other through it: never through :class:`~nodeprov.runs.Orchestrator`,
which makes the parts, enters and leaves them in order, and offers what callers call."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from anyio.abc import TaskGroup

from ..errors import ConfigError
from ..store import Store, patience
from .checkpointing import Checkpointing
from .journal import Journal
from .lease import Lease
from .nodes import Nodes

if TYPE_CHECKING:
    from .driver import Drive, Driver, Steps, Teardown
    from .launch import Plan

__all__ = ["ControlPlane", "Task"]

Task = Callable[[], Coroutine[Any, Any, None]]


class ControlPlane:
    """One orchestrator's shared state. ``drives`` are the runs driven here, by id;
    ``launching`` the runs owned in the store whose drive is not begun yet (reconcile
    leaves both be). Its ``lease``, when lost, aborts every drive: another control plane
    may take the runs over."""

    def __init__(
        self,
        store: Store,
        *,
        holder: str,
        lease_ttl: float,
        provider_settings: dict[str, dict[str, Any]],
        teardown: Teardown,
        checkpoints: str | None,
    ) -> None:
        self.store = store
        self.lease = Lease(store, holder, lease_ttl, on_lost=self.abort_drives)
        self.journal = Journal(store, lambda: self.lease.owner)
        self.checkpoints = Checkpointing(store, checkpoints, flush=self.journal.flush)
        """Where runs' checkpoints go (``checkpoints``: a URL, None for the default)."""
        self.nodes = Nodes(store, provider_settings)
        self.teardown = teardown
        self.drives: dict[str, Drive] = {}
        self.launching: set[str] = set()
        self.driver: Driver | None = None  # set once made: it needs this plane
        self.tg: TaskGroup | None = None  # the orchestrator's, while it is entered

    def spawn(self, task: Task) -> None:
        """Start ``task`` in the orchestrator's task group; a run's own work rides a store
        outage out (:func:`~nodeprov.store.patience`) whoever started it.

        Raises:
            ConfigError: the orchestrator is not entered.
        """
        if self.tg is None:
            raise ConfigError("use the Orchestrator as an async context manager")
        self.tg.start_soon(_unhurried, task)

    def live(self, run_id: str) -> Drive | None:
        """The drive of ``run_id``, if it is driven here."""
        return self.drives.get(run_id)

    def driven(self, run_id: str) -> bool:
        """Whether ``run_id`` is driven here, or being launched."""
        return run_id in self.drives or run_id in self.launching

    def abort_drives(self) -> None:
        """Cut every drive's steps short (the lease was lost)."""
        for drive in list(self.drives.values()):
            drive.abort()

    def drive_here(self, drive: Drive, plan: Plan, steps: Steps | None = None) -> None:
        """Drive ``drive`` by ``plan`` (``steps``: the driver's, else its usual ones) in the
        task group; it is known as driven here from now until its drive ends.

        Raises:
            ConfigError: the orchestrator is not entered.
        """
        if self.tg is None:
            raise ConfigError("use the Orchestrator as an async context manager")
        self.drives[drive.run.id] = drive
        self.spawn(lambda: self._drive(drive, plan, steps))

    async def _drive(self, drive: Drive, plan: Plan, steps: Steps | None) -> None:
        assert self.driver is not None  # noqa: S101 - narrows a type: made with the plane
        try:
            await self.driver.drive(drive, plan, steps)
        finally:
            if self.drives.get(drive.run.id) is drive:
                del self.drives[drive.run.id]
            drive.events.end()  # after it left: a follower woken by the end must not find it driven


async def _unhurried(task: Task) -> None:
    """A run's own work, started for a caller in a hurry (a request) or not: it rides a store
    outage out (:func:`~nodeprov.store.patience`)."""
    with patience(None):
        await task()
