"""The ``audit`` command: what was asked of ``nodeprov serve``'s API, by whom (see
:mod:`nodeprov.service.audit`), read from the store."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from .app import JsonOption, StoreOption, app, errors, open_store, summary
from .render import emit, print_table, when

if TYPE_CHECKING:
    from ..store import AuditEntry

__all__ = ["audit"]


@app.command(short_help=summary("audit"))
def audit(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's entries.")] = None,
    after: Annotated[int, typer.Option(min=0, help="Only entries after this seq (to page).")] = 0,
    limit: Annotated[int, typer.Option(min=1, help="At most this many entries.")] = 1000,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """The API's audit trail, oldest first: who (token, tenant) asked for what, on what."""

    async def load() -> list[AuditEntry]:
        async with await open_store(store) as opened:
            return await opened.audit.entries(tenant=tenant, after=after, limit=limit)

    with errors():
        entries = anyio.run(load)
    if json_output:
        for entry in entries:
            emit(dataclasses.asdict(entry) | {"detail": json.loads(entry.detail)})
        return
    print_table(
        ["seq", "at", "tenant", "token", "action", "on", "detail"],
        [
            [
                str(entry.seq),
                when(entry.at),
                entry.tenant,
                f"{entry.token_name} ({entry.token_id})",
                entry.action,
                entry.resource,
                " ".join(f"{key}={json.dumps(value)}" for key, value in json.loads(entry.detail).items()),
            ]
            for entry in entries
        ],
        ids=("seq", "on"),
    )
