"""``nodeprov checkpoints``, ``checkpoint``, ``diff``: a run's checkpoints (its workspace with
its agent's session at one moment), listed, taken now, compared."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from ..errors import RunStateError
from .app import JsonOption, RunOption, StoreOption, app, checkpoints, errors, open_store, summary
from .render import emit, out, print_table, when

if TYPE_CHECKING:
    from ..store import CheckpointRecord

__all__ = ["checkpoint", "diff", "list_checkpoints"]


def _size(count: int) -> str:
    if count < 1000:
        return f"{count} B"
    scaled, unit = float(count), "B"
    for unit in ("kB", "MB", "GB"):  # noqa: B007 - the last one reached is the one shown
        scaled /= 1000
        if scaled < 1000:
            break
    return f"{scaled:,.1f} {unit}"


def _json(record: CheckpointRecord) -> dict[str, Any]:
    body = dataclasses.asdict(record)
    body["packs"] = len(record.pack_names)
    body["changed"] = json.loads(record.changed)
    return body


def _changed(record: CheckpointRecord) -> str:
    changed = json.loads(record.changed)
    return f"+{changed['added']} ~{changed['modified']} -{changed['removed']}"


@app.command("checkpoints", short_help=summary("checkpoints"))
def list_checkpoints(run_id: RunOption, store: StoreOption = None, json_output: JsonOption = False) -> None:
    """List a run's checkpoints: when, why (pause, turn, request; fork or rewind where one
    began), the turn, the files and their size, what each added to the object store, and the
    paths it changed (added, modified, removed) since the one before."""

    async def load() -> list[CheckpointRecord]:
        async with await open_store(store) as opened:
            if await opened.run(run_id) is None:
                raise RunStateError(f"no run {run_id}")
            return await opened.checkpoints.of_run(run_id)

    with errors():
        records = anyio.run(load)
    if json_output:
        for record in records:
            emit(_json(record))
        return
    print_table(
        ["checkpoint", "at", "reason", "turn", "files", "size", "stored", "changed"],
        [
            (
                record.id,
                when(record.created_at),
                record.reason,
                str(record.turn),
                str(record.files),
                _size(record.size),
                _size(record.stored),
                _changed(record),
            )
            for record in records
        ],
        ids=("checkpoint",),
    )


@app.command(short_help=summary("checkpoint"))
def checkpoint(
    run_id: RunOption,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the checkpoint.")] = 600,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Checkpoint a running run now, wherever it is driven (its control plane checks twice a
    second): its workspace and its agent's session, while the agent goes on."""

    async def take() -> CheckpointRecord:
        from ..runs import Orchestrator

        async with (
            await open_store(store) as opened,
            Orchestrator(opened, reconcile_interval=0, retention=None, checkpoints=checkpoints()) as plane,
        ):
            return await plane.checkpoints.take(run_id, within=timeout)

    with errors():
        record = anyio.run(take)
    if json_output:
        emit(_json(record))
        return
    out.print(
        f"{record.id}: {record.files} files, {_size(record.size)} ({_size(record.stored)} new), "
        f"{_changed(record)}",
        soft_wrap=True,
        markup=False,
    )


@app.command(short_help=summary("diff"))
def diff(
    run_id: RunOption,
    first: Annotated[str, typer.Argument(metavar="A", help="The checkpoint before.")],
    second: Annotated[str, typer.Argument(metavar="B", help="The checkpoint after.")],
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """What changed in a run's workspace from checkpoint A to B: the paths added (+),
    modified (~) and removed (-), then a unified diff of each text file that changed."""

    async def compare() -> Any:
        from ..runs import Orchestrator

        async with (
            await open_store(store) as opened,
            Orchestrator(opened, reconcile_interval=0, retention=None, checkpoints=checkpoints()) as plane,
        ):
            return await plane.checkpoints.diff(run_id, first, second)

    with errors():
        found = anyio.run(compare)
    changes = found.changes
    if json_output:
        emit(
            {
                "added": list(changes.added),
                "modified": list(changes.modified),
                "removed": list(changes.removed),
                "binary": list(found.binary),
                "patches": list(found.patches),
            }
        )
        return
    for mark, paths in (("+", changes.added), ("~", changes.modified), ("-", changes.removed)):
        for path in paths:
            out.print(f"{mark} {path}", soft_wrap=True, markup=False, highlight=False)
    for patch in found.patches:
        out.print(patch, end="", soft_wrap=True, markup=False, highlight=False)
    for path in found.binary:
        out.print(f"binary or large: {path}", soft_wrap=True, markup=False, highlight=False)
