"""What the CLI prints: rich rendering of agent messages, run events and tables; JSON lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from rich import box
from rich.console import Console
from rich.table import Table

from ..runs import AgentMessage, NodeReady, NodeReleased, RunEvent, RunFinished, RunPaused

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def emit(row: dict[str, Any]) -> None:
    """One JSON object per line on stdout, flushed: a script may be reading as it comes."""
    sys.stdout.write(json.dumps(row) + "\n")
    sys.stdout.flush()


def print_table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, ids: Collection[str] = ()) -> None:
    """A table whose ``ids`` columns (identifiers) are printed whole, never cut or folded (a
    broken id cannot be pasted back); in a narrow terminal the other columns wrap instead."""
    cells = [list(row) for row in rows]
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False)  # light borders: more room for the cells
    for index, header in enumerate(headers):
        if header in ids:
            width = max([len(header), *(len(row[index]) for row in cells)])
            grid.add_column(header, no_wrap=True, min_width=width)
        else:
            grid.add_column(header, overflow="fold")
    for row in cells:
        grid.add_row(*row)
    out.print(grid)


def when(timestamp: str) -> str:
    """An ISO timestamp to the minute, with a space where a narrow column may wrap it."""
    return timestamp[:16].replace("T", " ")


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
