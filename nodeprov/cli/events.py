"""How the CLI prints agent messages and run events. Apart from :mod:`.render` because it
imports the SDK, which commands that show no events never load."""

from __future__ import annotations

import json

from claude_agent_sdk import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from ..runs import AgentMessage, NodeReady, NodeReleased, RunEvent, RunFinished, RunPaused
from .render import emit, out


def render_message(message: Message) -> None:
    if isinstance(message, SystemMessage) and message.subtype == "init":
        out.print(
            f"[dim]agent started: session {message.data.get('session_id')}, cwd {message.data.get('cwd')}[/]"
        )
    elif isinstance(message, AssistantMessage):
        for block in message.content:
            if isinstance(block, TextBlock):
                out.print(block.text)
            elif isinstance(block, ToolUseBlock):
                out.print(f"[cyan]→ {block.name}[/] {json.dumps(block.input)[:300]}")
    elif isinstance(message, UserMessage) and isinstance(message.content, list):
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                text = block.content if isinstance(block.content, str) else json.dumps(block.content)
                out.print(f"[dim]← {text[:500]}[/]")


def show_event(event: RunEvent, json_output: bool) -> None:
    if json_output:
        emit(event.to_json())
    elif isinstance(event, AgentMessage):
        render_message(event.message)
    elif isinstance(event, NodeReady):
        how = (
            "reused"
            if event.reused
            else "provisioned" + (", transcript restored" if event.transcript_restored else "")
        )
        out.print(f"[dim]node {event.node_id} {how}[/]", soft_wrap=True)
    elif isinstance(event, NodeReleased):
        out.print(f"[dim]node {event.node_id} {'kept' if event.kept else 'destroyed'}[/]", soft_wrap=True)
    elif isinstance(event, RunPaused):
        out.print(f"paused ({event.pause_kind}): {event.reason}")
    elif isinstance(event, RunFinished):
        colour = {"ok": "green", "paused": "yellow"}.get(event.outcome, "red")
        out.print(f"\nresult: [{colour}]{event.outcome}[/]" + (f": {event.error}" if event.error else ""))
        if event.agent_session_id:
            out.print(f"session: {event.agent_session_id}", soft_wrap=True)
