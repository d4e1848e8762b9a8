"""Run events: what happened to a run, in order, durable in the store.

Each event has the run's id, a sequence number counting from 1 over the run's whole life
(resumes continue it), and a time. :meth:`RunEvent.to_json` is its stored and ``--json``
form; :func:`event_from_json` reads it back, so a subscriber in another process, or after
the control plane restarted, gets the same events.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .._json import dumps
from ..agents.messages import Message, json_value, message_from_json, message_to_json

__all__ = [
    "AgentDetached",
    "AgentMessage",
    "AgentReattached",
    "CheckpointFailed",
    "CheckpointSaved",
    "NodeReady",
    "NodeReleased",
    "RunEvent",
    "RunFinished",
    "RunPaused",
    "RunStarted",
    "event_from_json",
]


@dataclass(frozen=True)
class RunEvent:
    """Something that happened to a run."""

    kind: ClassVar[str] = "event"
    run_id: str
    seq: int
    at: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict, e.g. for server-sent events: ``{"type": kind, ...fields}``."""
        return {
            "type": self.kind,
            **{f.name: json_value(getattr(self, f.name)) for f in dataclasses.fields(self)},
        }

    @functools.cached_property
    def encoded(self) -> str:
        """:meth:`to_json` as one line of JSON, made once: the store and every event stream
        relaying the event share it."""
        return dumps(self.to_json())


@dataclass(frozen=True)
class RunStarted(RunEvent):
    """A drive of the run began: its first start, or a resume (``resumed_from`` names the
    snapshot's pause kind and time), or a fork or a rewind (``checkpoint``: the checkpoint
    it began at, which ``resumed_from`` names with its run). ``prompt`` is the text the agent
    is given, ``images`` its images by reference (:meth:`~nodeprov.prompts.ImageBlock.ref`:
    hash, media type, size; the bytes stay in the store)."""

    kind: ClassVar[str] = "run.started"
    prompt: str
    provider: str
    resumed_from: str | None = None
    agent: str = "claude"  # history, not a choice: events stored before runs named their agent were Claude's
    images: tuple[dict[str, Any], ...] = ()
    checkpoint: str | None = None


@dataclass(frozen=True)
class NodeReady(RunEvent):
    kind: ClassVar[str] = "node.ready"
    node_id: str
    reused: bool
    transcript_restored: bool
    pool: str | None = None
    """The warm pool the node was claimed from (:mod:`nodeprov.runs.pools`)."""
    workspace_restored: str | None = None
    """The checkpoint whose workspace a fresh node got for the resume (none: as provisioned)."""


@dataclass(frozen=True)
class AgentMessage(RunEvent):
    """One message of the agent, in the one model of every agent (its own message in
    ``message.raw``)."""

    kind: ClassVar[str] = "agent.message"
    message: Message

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "run_id": self.run_id,
            "seq": self.seq,
            "at": self.at,
            "message": message_to_json(self.message),
        }


@dataclass(frozen=True)
class RunPaused(RunEvent):
    kind: ClassVar[str] = "run.paused"
    pause_kind: str
    reason: str
    token: str
    node_kept: bool


@dataclass(frozen=True)
class RunFinished(RunEvent):
    """The last event of a drive: ``outcome`` is ok, paused or error."""

    kind: ClassVar[str] = "run.finished"
    outcome: str
    error: str | None
    agent_session_id: str | None


@dataclass(frozen=True)
class NodeReleased(RunEvent):
    """The run let go of its node: destroyed, or ``kept`` for a resume (and ``suspended``
    when the provider could suspend it)."""

    kind: ClassVar[str] = "node.released"
    node_id: str
    kept: bool
    suspended: bool = False


@dataclass(frozen=True)
class AgentDetached(RunEvent):
    """The channel to the agent's process dropped (``reason``); the agent goes on under its
    keeper on the node while the run re-attaches (then :class:`AgentReattached`)."""

    kind: ClassVar[str] = "agent.detached"
    reason: str


@dataclass(frozen=True)
class AgentReattached(RunEvent):
    """The run is attached to its agent's process again, ``gap`` seconds after the channel
    dropped, after ``attempts`` tries; the agent's messages go on from where they were, none
    lost or repeated."""

    kind: ClassVar[str] = "agent.reattached"
    gap: float
    attempts: int


@dataclass(frozen=True)
class CheckpointSaved(RunEvent):
    """The run's workspace and its agent's session were checkpointed (at a pause, after a
    turn, on request: ``reason``): ``files`` of ``size`` bytes in all, of which ``stored``
    bytes were new to the object store; ``added``, ``modified``, ``removed``: paths changed
    since the run's checkpoint before."""

    kind: ClassVar[str] = "checkpoint.saved"
    checkpoint_id: str
    reason: str
    files: int
    size: int
    stored: int
    added: int
    modified: int
    removed: int


@dataclass(frozen=True)
class CheckpointFailed(RunEvent):
    """A checkpoint could not be taken (``error`` says why): none was recorded, and the run
    goes on."""

    kind: ClassVar[str] = "checkpoint.failed"
    reason: str
    error: str


_EVENTS: dict[str, type[RunEvent]] = {
    cls.kind: cls
    for cls in (
        RunStarted,
        NodeReady,
        AgentMessage,
        AgentDetached,
        AgentReattached,
        RunPaused,
        RunFinished,
        NodeReleased,
        CheckpointSaved,
        CheckpointFailed,
    )
}


def event_from_json(body: Mapping[str, Any]) -> RunEvent:
    """The event whose :meth:`RunEvent.to_json` is ``body``.

    Raises:
        ValueError: ``body`` is not an event of a known type.
    """
    cls = _EVENTS.get(str(body.get("type")))
    if cls is None:
        raise ValueError(f"not a run event: {body.get('type')!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    fields = {name: value for name, value in body.items() if name in names}
    if cls is AgentMessage:
        fields["message"] = message_from_json(body.get("message") or {})
    if cls is RunStarted:
        fields["images"] = tuple(fields.get("images") or ())
    return cls(**fields)
