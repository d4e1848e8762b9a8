"""How the CLI prints agent messages and run events."""

from __future__ import annotations

import json

from rich.markup import escape

from ..agents.messages import AgentText, ErrorMessage, Message, Notice, Result, Thinking, ToolResult, ToolUse
from ..runs import (
    AgentDetached,
    AgentMessage,
    AgentReattached,
    CheckpointFailed,
    CheckpointSaved,
    NodeReady,
    NodeReleased,
    RunEvent,
    RunFinished,
    RunPaused,
    RunStarted,
)
from .render import emit, out

__all__ = ["render_message", "show_event"]


def render_message(message: Message) -> None:
    if isinstance(message, AgentText):
        out.print(message.text, markup=False)
    elif isinstance(message, Thinking):
        out.print(f"[dim italic]{escape(message.text[:500])}[/]")
    elif isinstance(message, ToolUse):
        out.print(f"[cyan]→ {escape(message.name)}[/] {escape(json.dumps(dict(message.input))[:300])}")
    elif isinstance(message, ToolResult):
        out.print(f"[{'red' if message.is_error else 'dim'}]← {escape(message.output[:500])}[/]")
    elif isinstance(message, ErrorMessage):
        out.print(f"[red]agent error: {escape(message.message)}[/]")
    elif isinstance(message, Notice) and message.session_id:
        out.print(
            f"[dim]agent session {escape(message.session_id)} ({escape(message.subtype)})[/]", soft_wrap=True
        )
    elif isinstance(message, Result) and message.structured is not None:
        out.print(json.dumps(message.structured), markup=False, soft_wrap=True)


def show_event(event: RunEvent, json_output: bool) -> None:
    if json_output:
        emit(event.to_json())
    elif isinstance(event, AgentMessage):
        render_message(event.message)
    elif isinstance(event, RunStarted):
        images = f", {len(event.images)} image{'s'[: len(event.images) != 1]}" if event.images else ""
        # A fork's or a rewind's start: "checkpoint CK of run RUN".
        origin = f", from {escape(event.resumed_from or '')}" if event.checkpoint else ""
        out.print(
            f"[dim]agent {escape(event.agent)} on a {escape(event.provider)} node{images}{origin}[/]",
            soft_wrap=True,
        )
    elif isinstance(event, NodeReady):
        how = (
            "reused"
            if event.reused
            else f"claimed from pool {escape(event.pool)}"
            if event.pool
            else "provisioned"
            + (", session state restored" if event.transcript_restored else "")
            + (f", workspace restored from {event.workspace_restored}" if event.workspace_restored else "")
        )
        out.print(f"[dim]node {event.node_id} {how}[/]", soft_wrap=True)
    elif isinstance(event, AgentDetached):
        out.print(f"[yellow]agent detached ({escape(event.reason)}): re-attaching[/]", soft_wrap=True)
    elif isinstance(event, AgentReattached):
        out.print(f"[dim]agent re-attached after {event.gap:.1f} s[/]", soft_wrap=True)
    elif isinstance(event, NodeReleased):
        out.print(f"[dim]node {event.node_id} {'kept' if event.kept else 'destroyed'}[/]", soft_wrap=True)
    elif isinstance(event, CheckpointSaved):
        out.print(
            f"[dim]checkpoint {event.checkpoint_id} ({escape(event.reason)}): {event.files} files, "
            f"{event.stored:,} bytes new, +{event.added} ~{event.modified} -{event.removed}[/]",
            soft_wrap=True,
        )
    elif isinstance(event, CheckpointFailed):
        out.print(
            f"[yellow]checkpoint ({escape(event.reason)}) failed: {escape(event.error)}[/]", soft_wrap=True
        )
    elif isinstance(event, RunPaused):
        out.print(f"paused ({escape(event.pause_kind)}): {escape(event.reason)}")
    elif isinstance(event, RunFinished):
        colour = {"ok": "green", "paused": "yellow"}.get(event.outcome, "red")
        out.print(
            f"\nresult: [{colour}]{escape(event.outcome)}[/]"
            + (f": {escape(event.error)}" if event.error else "")
        )
        if event.agent_session_id:
            out.print(f"session: {event.agent_session_id}", soft_wrap=True)
