"""``nodeprov prune``: delete what is over and old from the store, now (every control plane
also does it, at most hourly between them all: see :mod:`nodeprov.runs.retention`)."""

from __future__ import annotations

from typing import Annotated

import anyio
import typer

from .app import JsonOption, StoreOption, app, checkpoints, errors, open_store, summary
from .render import emit, out, print_table

__all__ = ["prune"]


@app.command(short_help=summary("prune"))
def prune(
    older_than: Annotated[
        str,
        typer.Option(help="Age past which a run that is over goes: 30d, 12h, 90m, or seconds."),
    ] = "30d",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would go; delete nothing.")] = False,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Delete the runs that are over (paused, finished or failed) and untouched for
    --older-than, with their events, snapshots, checkpoints, node records, transcripts and
    images no other run names; the pool nodes and idempotency keys as old; dead leases
    nothing names; and the objects of checkpoints (in NODEPROV_CHECKPOINTS' store) that no
    checkpoint names and that are over a day old. Runs whose nodes the store still holds
    stay until reconcile settles them."""
    from ..runs.checkpointing import Checkpointing
    from ..runs.retention import parse_age
    from ..runs.retention import prune as prune_store

    async def go() -> dict[str, int | bool]:
        async with await open_store(store) as opened:
            report = await prune_store(opened, parse_age(older_than), dry_run=dry_run)
            counts = report.as_json()
            if not dry_run:
                kept = Checkpointing(opened, checkpoints())
                try:
                    counts["checkpoint_objects"] = await kept.collect()
                finally:
                    await kept.aclose()
        return counts

    with errors():
        counts = anyio.run(go)
    if json_output:
        emit(counts)
        return
    out.print("would delete:" if dry_run else "deleted:")
    print_table(["what", "rows"], [(name, str(count)) for name, count in counts.items() if name != "dry_run"])
