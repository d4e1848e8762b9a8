"""The audit trail of the HTTP API: who (a token's id, name and tenant) asked for what
(``run.start``, ``node.exec``, ...) on what, kept in the store (``store.audit``) and read by
an admin at ``GET /v1/audit`` or with ``nodeprov audit``.

An entry is written once the request is authorized and before the service acts on it: if
the store cannot take the entry, nothing is done (503), so no action goes unrecorded. An
entry says what was asked, not how it ended (a run's events and state say that). Its detail
names settings, options and environment variables, never their values; an exec's command is
kept (cut at 1,000 characters), never its stdin.

The retention policy (``nodeprov store gc``, the service's own) deletes entries older than
``audit_days``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from .answers import AuditEntryOut
from .auth import Principal, forbid
from .schemas import ErrorBody
from .state import Caller, service_of

__all__ = ["note", "router"]

_COMMAND_KEPT = 1000

router = APIRouter(prefix="/v1", responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}})


async def note(request: Request, who: Principal, action: str, resource: str, **detail: Any) -> None:
    """Keep an entry: ``who`` asks for ``action`` on ``resource``.

    Raises:
        StoreError: the store could not take it (the request then fails, undone).
    """
    await service_of(request).store.audit.note(
        tenant=who.tenant,
        token_id=who.id,
        token_name=who.name,
        action=action,
        resource=resource,
        detail={key: value for key, value in detail.items() if value is not None},
    )


def command_of(argv: list[str]) -> str:
    """An exec's command as the audit keeps it: its words, joined and cut."""
    joined = json.dumps(argv)
    return joined if len(joined) <= _COMMAND_KEPT else joined[: _COMMAND_KEPT - 3] + "..."


@router.get("/audit")
async def audit(
    request: Request,
    who: Caller,
    after: Annotated[int, Query(ge=0, lt=2**63, description="Entries after this seq (paging).")] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000, description="At most this many entries.")] = 1000,
    tenant: Annotated[str | None, Query(max_length=200, description="Only this tenant's entries.")] = None,
) -> list[AuditEntryOut]:
    """What was asked of the API, oldest first (an admin's): page with ``after`` set to the
    last ``seq`` read."""
    forbid(who, "admin")
    entries = await service_of(request).store.audit.entries(tenant=tenant, after=after, limit=limit)
    return [
        AuditEntryOut(**dataclasses.asdict(entry) | {"detail": json.loads(entry.detail)}) for entry in entries
    ]
