"""The handle a caller holds on a run this control plane drives, and what a pause is."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigError
from ..store import RunRecord, SnapshotRecord, now
from .events import RunEvent
from .journal import RunEvents
from .state import RunState

__all__ = ["TURN_ENDED", "Pause", "PauseKind", "Run", "check_pause_kind", "snapshot_of"]

PauseKind = Literal["human", "external", "system"]
_PAUSE_KINDS = ("human", "external", "system")
TURN_ENDED = "the turn ended: the run waits for its next message"
"""The reason of the pause a run makes at its agent's result with ``pause_after_turn``."""


@dataclass
class Pause:
    """A pause asked of a run, as it goes."""

    kind: str
    reason: str
    keep_node: bool
    keep_for: float
    saved: SnapshotRecord | None = None  # written to the store
    checkpointed: bool = False  # its checkpoint taken (or tried): once, when settling is retried
    snapshot: SnapshotRecord | None = None  # returned to the caller, once the run is paused


class Run:
    """A run driven by this control plane. Subscribe with :meth:`events`; wait with
    :meth:`wait`; pause with :meth:`pause`. ``state`` is its :class:`RunState`."""

    def __init__(
        self,
        run_id: str,
        state: RunState,
        events: RunEvents,
        pause: Callable[[Pause], Awaitable[SnapshotRecord]],
        keep_for: float,
        *,
        keep_node: bool = False,
        agent_grace: float | None = None,
    ) -> None:
        self.id = run_id
        self.state = state
        self.outcome: str | None = None
        self.error: str | None = None
        self.agent_session_id: str | None = None
        self.first_seq = events.first_seq
        """The sequence number of this drive's ``run.started`` (a resume continues the run's)."""
        self._events = events
        self._pause = pause  # the driver's: stops the agent, saves the snapshot
        self._keep_for = keep_for
        self.keep_node = keep_node
        """Whether a pause that does not say keeps the node (see :class:`~nodeprov.runs.RunSpec`)."""
        self.agent_grace = agent_grace
        """Seconds its agent runs on, kept, with no control plane attached (None: not kept)."""

    def events(self, *, after: int | None = None) -> AsyncIterator[RunEvent]:
        """The events of this drive of the run from its ``run.started`` (a late subscriber
        gets them from the store first), or, with ``after``, every event of the run's whole
        life above that sequence number; then live ones, until this drive ends. Any number
        of subscribers; one that falls behind by more than a buffer's worth reads what it
        missed from the store.

        Raises:
            StoreError: the store could not be read.
        """
        return self._events.replay(after=after)

    async def wait(self) -> str:
        """Wait until nobody drives the run here; return its outcome (ok, paused, error), or
        ``detached`` when this control plane left it running (:meth:`Orchestrator.detach`)."""
        await self._events.wait_ended()
        assert self.outcome is not None  # noqa: S101 - an invariant, not a check of input: set before the drive ends
        return self.outcome

    async def pause(
        self,
        kind: PauseKind = "human",
        reason: str = "",
        *,
        keep_node: bool | None = None,
        keep_for: float | None = None,
    ) -> SnapshotRecord:
        """Stop the agent (its interrupt, then abort) and save a snapshot.

        Works while the run starts (provisioning is interrupted; the snapshot keeps the
        session being resumed) or runs. ``kind`` (human, external, system) is diagnostics
        metadata. With ``keep_node`` (default: the run's :attr:`keep_node`) the node stays
        for the resume, for ``keep_for`` seconds at most (default: the orchestrator's
        ``keep_for``) and never past its own lifetime: after that reconcile destroys it,
        and the resume provisions a new one, as it does when the node is not kept. Returns
        the snapshot, whose ``token`` resumes the run.

        Raises:
            ConfigError: ``kind`` is not human, external or system.
            RunStateError: the run is finishing or over, is being paused already, or
                failed while pausing (its error says why).
        """
        check_pause_kind(kind)
        if keep_for is not None and not keep_for > 0:
            raise ConfigError(f"keep_for must be positive, got {keep_for!r}")
        return await self._pause(
            Pause(
                kind,
                reason,
                self.keep_node if keep_node is None else keep_node,
                self._keep_for if keep_for is None else keep_for,
            )
        )


def check_pause_kind(kind: str) -> None:
    """Refuse a pause of another kind than human, external or system.

    Raises:
        ConfigError: ``kind`` is not human, external or system.
    """
    if kind not in _PAUSE_KINDS:
        raise ConfigError(f"pause kind must be one of {', '.join(_PAUSE_KINDS)}, got {kind!r}")


def snapshot_of(
    record: RunRecord,
    *,
    node_id: str | None,
    agent_session_id: str | None,
    kind: str,
    reason: str,
    keep_node: bool,
) -> SnapshotRecord:
    """A snapshot of ``record`` as it stands, with a fresh single-use token."""
    return SnapshotRecord(
        token=f"tok-{secrets.token_urlsafe(24)}",
        run_id=record.id,
        node_id=node_id,
        node_kept=keep_node,
        provider=record.node_provider,
        agent_session_id=agent_session_id,
        project_key=record.project_key,
        state=record.state,
        pause_kind=kind,
        reason=reason[:2000],
        created_at=now(),
        used_at=None,
        agent=record.agent,
    )
