"""``/v1/runs/{run_id}/checkpoints`` and ``/v1/runs/{run_id}/diff``: a run's checkpoints (its
workspace with its agent's session at one moment), listed, taken now, compared."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from ..errors import RunStateError
from ..store import CheckpointRecord
from .answers import CheckpointOut, DiffOut
from .audit import note
from .auth import forbid
from .problems import ServiceError
from .runs import load_run
from .schemas import ErrorBody
from .state import Caller, service_of

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
