"""What the CLI prints: tables and JSON lines (agent messages and run events: :mod:`.events`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["emit", "err", "out", "print_table", "when"]

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def emit(row: dict[str, Any]) -> None:
    """One JSON object per line on stdout, flushed: a script may be reading as it comes."""
    sys.stdout.write(json.dumps(row) + "\n")
    sys.stdout.flush()


def print_table(
    headers: Sequence[str], rows: Iterable[Sequence[str | Text]], *, ids: Collection[str] = ()
) -> None:
    """A table whose ``ids`` columns (identifiers) are printed whole, never cut or folded (a
    broken id cannot be pasted back); in a narrow terminal the other columns wrap instead.
    Cells are plain text (a ``Text`` for styled ones): what came from outside, an agent's
    words or a store's, is never read as markup.

    When the table cannot fit the width (a narrow terminal, or a pipe: 80 columns) without
    squeezing a column below a few characters, each row is printed as a record instead: its
    first cell on a line of its own, then one ``header: value`` line per other cell."""
    cells = [[cell if isinstance(cell, Text) else Text(cell) for cell in row] for row in rows]
    widths = [
        max([len(header), *(len(row[index].plain) for row in cells)]) for index, header in enumerate(headers)
    ]
    squeezed = [_NARROWEST if header not in ids else widths[index] for index, header in enumerate(headers)]
    needed = sum(min(width, squeezed[index]) for index, width in enumerate(widths)) + 2 * len(headers)
    if cells and needed > out.width:
        for row in cells:
            out.print(row[0], soft_wrap=True)
            for header, cell in zip(headers[1:], row[1:], strict=True):
                if cell.plain:
                    out.print(Text.assemble(f"  {header}: ", cell), soft_wrap=True)
        return
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False)  # light borders: more room for the cells
    for index, header in enumerate(headers):
        if header in ids:
            grid.add_column(header, no_wrap=True, min_width=widths[index])
        else:
            grid.add_column(header, overflow="fold", min_width=min(widths[index], _NARROWEST))
    for row in cells:
        grid.add_row(*row)
    out.print(grid)


_NARROWEST = 10  # a column squeezed below this many characters is unreadable


def when(timestamp: str) -> str:
    """An ISO timestamp to the minute, with a space where a narrow column may wrap it."""
    return timestamp[:16].replace("T", " ")
