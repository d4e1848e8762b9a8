"""``/v1/runs/{run_id}/checkpoints`` and ``/v1/runs/{run_id}/diff``: a run's checkpoints (its
workspace with its agent's session at one moment), listed, taken now, compared; and
``/v1/runs/{run_id}/fork`` and ``/v1/runs/{run_id}/rewind``: a new run from one of them, or
the run itself resumed from an earlier one.

A fork is owned by the tenant of the run it is forked from (the caller's, unless an admin's:
the fork is in that tenant's workspace), recorded before it exists, as a started run's is."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from ..errors import RunStateError
from ..store import CheckpointRecord
from .answers import CheckpointOut, DiffOut, RunOut
from .audit import note
from .auth import forbid
from .idempotency import fingerprint
from .problems import ServiceError
from .runs import IdempotencyKey, load_run, new_run, resumed_detail, resumed_how, run_body
from .schemas import ErrorBody, ForkIn, RewindIn
from .state import Caller, Service, service_of

if TYPE_CHECKING:
    from ..runs import Run

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}})

_TAKE_WITHIN = 600.0  # seconds the replica that drives the run has to take the checkpoint


def checkpoint_body(record: CheckpointRecord) -> dict[str, Any]:
    """A checkpoint as the API shows it: not where its objects lie (the operator's)."""
    return {
        "id": record.id,
        "run_id": record.run_id,
        "seq": record.seq,
        "turn": record.turn,
        "reason": record.reason,
        "created_at": record.created_at,
        "files": record.files,
        "size": record.size,
        "stored": record.stored,
        "changed": json.loads(record.changed),
        "parent": record.parent,
        "agent_session_id": record.agent_session_id,
    }


@router.get(
    "/runs/{run_id}/checkpoints",
    response_model=None,
    responses={
        200: {"model": list[CheckpointOut], "description": "Its checkpoints, the first first."},
        404: {"model": ErrorBody},
    },
)
async def list_checkpoints(request: Request, run_id: str, who: Caller) -> list[dict[str, Any]]:
    """A run's checkpoints: at each pause, and those asked for."""
    forbid(who, "read")
    service = service_of(request)
    await load_run(service, who, run_id)
    return [checkpoint_body(record) for record in await service.store.checkpoints.of_run(run_id)]


@router.post(
    "/runs/{run_id}/checkpoints",
    response_model=None,
    status_code=201,
    responses={
        201: {"model": CheckpointOut, "description": "The checkpoint, recorded."},
        404: {"model": ErrorBody},
        409: {"model": ErrorBody},
        502: {"model": ErrorBody},
        504: {"model": ErrorBody},
    },
)
async def take_checkpoint(request: Request, run_id: str, who: Caller) -> JSONResponse:
    """Checkpoint a running run now, on whichever replica drives it, while its agent goes on:
    201 with the checkpoint; 409 when the run is not running; 502 when the checkpoint failed
    (nothing was recorded; the run's ``checkpoint.failed`` event says why too)."""
    forbid(who, "runs")
    service = service_of(request)
    await load_run(service, who, run_id)
    await note(request, who, "run.checkpoint", run_id)
    record = await service.orchestrator.checkpoints.take(run_id, within=_TAKE_WITHIN)
    return JSONResponse(checkpoint_body(record), 201)


@router.get(
    "/runs/{run_id}/diff",
    response_model=None,
    responses={
        200: {"model": DiffOut, "description": "What changed."},
        404: {"model": ErrorBody},
        422: {"model": ErrorBody},
    },
)
async def diff_checkpoints(
    request: Request,
    run_id: str,
    who: Caller,
    first: Annotated[str, Query(alias="from", description="The checkpoint before.")],
    second: Annotated[str, Query(alias="to", description="The checkpoint after.")],
) -> dict[str, Any]:
    """What changed in a run's workspace from checkpoint ``from`` to ``to``: the paths, and a
    unified diff of each text file."""
    forbid(who, "read")
    service = service_of(request)
    await load_run(service, who, run_id)
    try:
        found = await service.orchestrator.checkpoints.diff(run_id, first, second)
    except RunStateError as error:  # a checkpoint it has not: the query is wrong, the run is there
        raise ServiceError(422, "checkpoint_not_found", str(error)) from None
    return {
        "added": list(found.changes.added),
        "modified": list(found.changes.modified),
        "removed": list(found.changes.removed),
        "binary": list(found.binary),
        "patches": list(found.patches),
    }


async def _checkpoint_of(service: Service, run_id: str, checkpoint: str | None) -> None:
    """Raises ServiceError (422) when run ``run_id`` has no checkpoint ``checkpoint`` (the
    body is wrong, the run is there); None names none."""
    if checkpoint is not None:
        try:
            await service.orchestrator.checkpoints.get(run_id, checkpoint)
        except RunStateError as error:
            raise ServiceError(422, "checkpoint_not_found", str(error)) from None


@router.post(
    "/runs/{run_id}/fork",
    status_code=201,
    response_model=None,
    responses={
        201: {"model": RunOut, "description": "The new run, starting."},
        200: {
            "model": RunOut,
            "description": "The run an earlier request with this Idempotency-Key forked.",
        },
        404: {"model": ErrorBody},
        409: {"model": ErrorBody},
        422: {"model": ErrorBody},
    },
)
async def fork_run(
    request: Request, run_id: str, body: ForkIn, who: Caller, key: IdempotencyKey = None
) -> JSONResponse:
    """Start a new run from one of a run's checkpoints (its latest by default), the run in any
    state: on a fresh node given that checkpoint's workspace, its agent's session a copy of
    the run's as it stood then, so the two go on apart. The new run is the run's provider,
    settings, agent and options, with the body's laid over as for a resume; it names its
    origin (``forked_from``, ``forked_at``). Returns at once (follow its events). 409 when
    the run has no checkpoint yet; 422 ``checkpoint_not_found`` when it has not the one named."""
    forbid(who, "runs")
    service = service_of(request)
    record = await load_run(service, who, run_id)
    service.check_provider(record.node_provider)  # a fresh node: of a provider offered here
    how = resumed_how(service, record, body)
    await _checkpoint_of(service, run_id, body.checkpoint)
    tenant = await service.store.owners.tenant_of("run", run_id)

    async def audit(fork_id: str) -> None:
        detail = resumed_detail(body)
        await note(request, who, "run.fork", run_id, fork=fork_id, checkpoint=body.checkpoint, **detail)

    async def start(fork_id: str) -> Run:
        return await service.orchestrator.fork(run_id, body.checkpoint, fork_id=fork_id, **how)

    made = fingerprint(f"fork {run_id}", body)
    return await new_run(service, who, key, made, tenant=tenant, audit=audit, start=start)


@router.post(
    "/runs/{run_id}/rewind",
    response_model=None,
    responses={
        200: {"model": RunOut, "description": "The run, resumed from the checkpoint."},
        404: {"model": ErrorBody},
        409: {"model": ErrorBody},
        422: {"model": ErrorBody},
    },
)
async def rewind_run(request: Request, run_id: str, body: RewindIn, who: Caller) -> dict[str, Any]:
    """Resume a paused (or failed) run from an earlier checkpoint of its own rather than where
    it stopped: on a fresh node given that checkpoint's workspace, its agent's session as it
    stood then (a copy under a new session id). The body is a resume's, with ``checkpoint``.
    409 when the run is not paused or failed (pause it first); 422 ``checkpoint_not_found``
    when it has no such checkpoint."""
    forbid(who, "runs")
    service = service_of(request)
    record = await load_run(service, who, run_id)
    how = resumed_how(service, record, body)
    await _checkpoint_of(service, run_id, body.checkpoint)
    await note(request, who, "run.rewind", run_id, checkpoint=body.checkpoint, **resumed_detail(body))
    run = await service.orchestrator.rewind(run_id, body.checkpoint, **how)
    return run_body(who, await load_run(service, who, run.id))
