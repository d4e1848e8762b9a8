"""Run events: what happened to a run, in order, durable in the store.

Each event has the run's id, a sequence number counting from 1 over the run's whole life
(resumes continue it), and a time. :meth:`RunEvent.to_json` is its stored and ``--json``
form; :func:`event_from_json` reads it back, so a subscriber in another process, or after
the control plane restarted, gets the same events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import claude_agent_sdk.types as sdk_types
from claude_agent_sdk import Message

__all__ = [
    "AgentMessage",
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
            **{f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)},
        }


@dataclass(frozen=True)
class RunStarted(RunEvent):
    """A drive of the run began: its first start, or a resume (``resumed_from`` names the
    snapshot's pause kind and time)."""

    kind: ClassVar[str] = "run.started"
    prompt: str
    provider: str
    resumed_from: str | None = None


@dataclass(frozen=True)
class NodeReady(RunEvent):
    kind: ClassVar[str] = "node.ready"
    node_id: str
    reused: bool
    transcript_restored: bool


@dataclass(frozen=True)
class AgentMessage(RunEvent):
    """One message of the agent, as the SDK parsed it."""

    kind: ClassVar[str] = "agent.message"
    message: Message


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
    kind: ClassVar[str] = "node.released"
    node_id: str
    kept: bool


_EVENTS: dict[str, type[RunEvent]] = {
    cls.kind: cls for cls in (RunStarted, NodeReady, AgentMessage, RunPaused, RunFinished, NodeReleased)
}


def event_from_json(body: Mapping[str, Any]) -> RunEvent:
    """The event whose :meth:`RunEvent.to_json` is ``body``. SDK messages are rebuilt as the
    SDK's own types.

    Raises:
        ValueError: ``body`` is not an event of a known type.
    """
    cls = _EVENTS.get(str(body.get("type")))
    if cls is None:
        raise ValueError(f"not a run event: {body.get('type')!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{name: _revive(value) for name, value in body.items() if name in names})


_FIELDS: dict[type, tuple[str, ...] | None] = {}  # a type's dataclass fields, None if it is none


def _jsonable(value: Any) -> Any:
    if value is None or type(value) in (str, int, float, bool):
        return value
    if type(value) is list:
        return [_jsonable(v) for v in value]
    if type(value) is dict:
        return {str(k): _jsonable(v) for k, v in value.items()}
    cls = type(value)
    names = _FIELDS.get(cls, ())
    if names == ():
        is_dataclass = dataclasses.is_dataclass(cls)
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)) if is_dataclass else None
    if names is not None:
        return {"kind": cls.__name__, **{name: _jsonable(getattr(value, name)) for name in names}}
    return _jsonable_other(value)


def _jsonable_other(value: Any) -> Any:
    """Mappings, sequences and scalars of types other than the built-in ones."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value if isinstance(value, (str, int, float, bool)) else repr(value)


def _revive(value: Any) -> Any:
    """Undo :func:`_jsonable` for the SDK's message and block dataclasses."""
    if isinstance(value, list):
        return [_revive(v) for v in value]
    if not isinstance(value, dict):
        return value
    cls = getattr(sdk_types, str(value.get("kind")), None)
    if isinstance(cls, type) and dataclasses.is_dataclass(cls):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: _revive(v) for k, v in value.items() if k in names})
    return {k: _revive(v) for k, v in value.items()}
