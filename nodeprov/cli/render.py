"""What the CLI prints: tables and JSON lines (agent messages and run events: :mod:`.events`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

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
