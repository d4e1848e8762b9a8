"""``/v1/runs``: start, list, get, pause, resume, and the events as server-sent events; and
``/v1/sessions`` and ``/v1/workspaces``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse

from ..errors import ConfigError, RunStateError
from ..runs import RunSpec, RunState
from ..runs.spec import ResumeFields
from ..store import DEFAULT_TENANT, RunRecord, SessionRecord, SnapshotRecord, new_id
from .answers import PausedRunOut, RunDetailOut, RunOut, SessionOut, WorkspaceDetailOut, WorkspaceOut
from .audit import note
from .auth import Principal, forbid
from .events import event_stream
from .idempotency import claim_key, fingerprint
from .policy import check_env, check_options, check_settings
from .problems import ServiceError
from .schemas import ErrorBody, PauseIn, ResumeIn, RunIn, prompt_of
from .state import Caller, Service, service_of
from .tenancy import pool_name, run_visible, workspace_name, workspace_shown, workspace_visible

if TYPE_CHECKING:
    from ..runs import Run

__all__ = ["IdempotencyKey", "load_run", "new_run", "resumed_detail", "resumed_how", "router", "run_body"]

router = APIRouter(prefix="/v1", responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}})

_PAUSE_POLL = 0.1
LAST_SEQ = 2**63 - 1  # the largest sequence number either store holds


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Retrying with the same key gets the same run, never a second one (kept a day).",
    ),
]


def run_body(
    who: Principal, record: RunRecord, snapshots: list[SnapshotRecord] | None = None
) -> dict[str, Any]:
    """A run as the API shows ``who`` it: its record less what only control planes use, with
    its JSON fields parsed and its workspace as the caller names it; with ``snapshots``,
    whether and how it may be resumed."""
    body: dict[str, Any] = {
        k: v for k, v in dataclasses.asdict(record).items() if k not in ("node_settings", "pause_request")
    }
    body["workspace_id"] = workspace_shown(who, record.workspace_id)
    for field in ("agent_options", "node_config", "prompt_blocks", "node_secret_fields"):
        body[field] = json.loads(body[field])
    body["settings"] = json.loads(record.node_settings)
    if snapshots is not None:
        body["snapshots"] = [
            {k: v for k, v in dataclasses.asdict(s).items() if k != "token"}
            | {"resumable": s.used_at is None}
            for s in snapshots
        ]
        body["resumable"] = record.state in ("paused", "failed") and any(s.used_at is None for s in snapshots)
    return body


async def load_run(service: Service, who: Principal, run_id: str) -> RunRecord:
    """The run, if it is within the caller's reach (another tenant's is not found)."""
    record = await service.store.run(run_id)
    if record is None or not await run_visible(service.store, who, run_id):
        raise ServiceError(404, "run_not_found", f"no run {run_id}")
    return record


def _options(body: RunIn | ResumeIn) -> dict[str, Any]:
    options: dict[str, Any] = {**body.options, "env": dict(body.env)}
    if isinstance(body, RunIn) and body.output_schema is not None:
        options["output_schema"] = body.output_schema
    return options


@router.post(
    "/runs",
    status_code=201,
    response_model=None,
    responses={
        201: {"model": RunOut, "description": "The run, started."},
        200: {
            "model": RunOut,
            "description": "The run an earlier request with this Idempotency-Key started.",
        },
        404: {"model": ErrorBody},
        409: {"model": ErrorBody},
        422: {"model": ErrorBody},
    },
)
async def start_run(request: Request, body: RunIn, who: Caller, key: IdempotencyKey = None) -> JSONResponse:
    """Start a run on a new node, or one claimed from a warm pool; returns at once (follow its events)."""
    forbid(who, "runs")
    service = service_of(request)
    config = service.config
    spec = RunSpec(
        prompt=prompt_of(body.prompt),
        provider=body.provider,
        pool=body.pool,  # as the caller names it (its errors too); the tenant's own once checked
        pool_wait=body.pool_wait,
        provider_settings=body.settings,
        node_config=body.node.config(owner=service.orchestrator.owner, default_ttl=config.node_ttl)
        if body.pool is None or body.node.model_fields_set  # with a pool: RunSpec.check refuses it
        else None,
        agent=body.agent,
        model=body.model,
        options=_options(body),
        permission=body.permission,
        workspace=workspace_name(who, body.workspace),
        deadline=body.timeout,
        idle_timeout=body.idle_timeout,
        keep_node=body.keep_node,
        pause_after_turn=body.pause_after_turn,
        agent_grace=body.agent_grace,
        checkpoint=body.checkpoint,
    )
    spec.check()
    name = await _provider_of(service, who, body)
    service.check_provider(name)
    check_settings(name, body.settings, config.allow_settings)
    agent = await spec.agent_name()
    check_options(agent, body.options, config.allow_options)
    check_env(body.env, config.allow_env)
    _check_grace(body.agent_grace, config.agent_grace)

    async def audit(run_id: str) -> None:
        await note(
            request,
            who,
            "run.start",
            run_id,
            provider=name,
            pool=body.pool,
            agent=agent,
            model=body.model,
            workspace=body.workspace,
            settings=sorted(body.settings),
            options=sorted(body.options),
            env=sorted(body.env),
        )

    async def start(run_id: str) -> Run:
        pool = None if body.pool is None else pool_name(who, body.pool)
        return await service.orchestrator.start(
            dataclasses.replace(spec, pool=pool, agent=agent, run_id=run_id)
        )

    made = fingerprint("run", body)
    return await new_run(service, who, key, made, tenant=who.tenant, audit=audit, start=start)


async def new_run(
    service: Service,
    who: Principal,
    key: str | None,
    print_: str,
    *,
    tenant: str,
    audit: Callable[[str], Awaitable[None]],
    start: Callable[[str], Awaitable[Run]],
) -> JSONResponse:
    """A new run made by ``start(run_id)`` (a start, a fork), owned by ``tenant`` before it
    exists (no moment sees it as another's), ``audit(run_id)`` noted first; with ``key`` (an
    ``Idempotency-Key`` of the request whose fingerprint is ``print_``), the run an earlier
    request made is answered again (200), never a second. 201 with the new run; nothing of
    it is left when ``start`` fails before it exists."""
    run_id = new_id("run")
    if key is not None:
        claim = await claim_key(
            service.store,
            who,
            key,
            kind="run",
            print_=print_,
            new_id=run_id,
            holder=service.orchestrator.owner,
        )
        if (existing := await service.store.run(claim.resource_id)) is not None:
            return JSONResponse(run_body(who, existing), 200, headers={"Idempotent-Replayed": "true"})
        run_id = claim.resource_id
    if tenant != DEFAULT_TENANT:
        await service.store.owners.add("run", run_id, tenant)
    await audit(run_id)
    try:
        run = await start(run_id)
    except BaseException:
        with anyio.CancelScope(shield=True):
            if await service.store.run(run_id) is None:  # nothing was made: a retry starts afresh
                await service.store.owners.remove("run", run_id)
                if key is not None:
                    await service.store.idempotency.forget(who.id, key)
        raise
    if key is not None:
        await service.store.idempotency.complete(who.id, key, json.dumps({"run_id": run.id}))
    return JSONResponse(run_body(who, await load_run(service, who, run.id)), 201)


def _check_grace(asked: float | None, offered: float | None) -> None:
    """A run's agent is kept no longer than the operator keeps agents (``--agent-grace``).

    Raises:
        ConfigError: it asks for longer, or for a kept agent where none are kept.
    """
    if asked and (offered is None or asked > offered):
        kept = f"at most {offered:g} s" if offered is not None else "not at all (serve --agent-grace 0)"
        raise ConfigError(f"agent_grace: this service keeps agents {kept}")


async def _provider_of(service: Service, who: Principal, body: RunIn) -> str:
    """The provider of a run to start (a pool's: it must be the caller's), for the policy."""
    if body.pool is None:
        assert body.provider is not None  # noqa: S101 - narrows a type: RunSpec.check says so
        return body.provider
    record = await service.store.pools.get(pool_name(who, body.pool))
    if record is None:
        raise ServiceError(404, "pool_not_found", f"no pool {body.pool!r}")
    return record.provider


@router.get(
    "/runs", response_model=None, responses={200: {"model": list[RunOut], "description": "The runs."}}
)
async def list_runs(
    request: Request,
    who: Caller,
    state: Annotated[list[RunState] | None, Query(description="Only runs in these states.")] = None,
    workspace: Annotated[str | None, Query(description="Only runs of this workspace.")] = None,
) -> list[dict[str, Any]]:
    """Runs, oldest first."""
    forbid(who, "read")
    records = await service_of(request).store.runs(
        states=tuple(s.value for s in state or ()), tenant=who.only
    )
    named = None if workspace is None else workspace_name(who, workspace)
    return [run_body(who, r) for r in records if named is None or r.workspace_id == named]


@router.get(
    "/runs/{run_id}",
    response_model=None,
    responses={200: {"model": RunDetailOut, "description": "The run."}, 404: {"model": ErrorBody}},
)
async def get_run(request: Request, run_id: str, who: Caller) -> dict[str, Any]:
    """A run, with its snapshots and whether it can be resumed."""
    forbid(who, "read")
    service = service_of(request)
    record = await load_run(service, who, run_id)
    return run_body(who, record, await service.store.snapshots(run_id))


@router.post(
    "/runs/{run_id}/pause",
    response_model=None,
    responses={
        200: {"model": PausedRunOut, "description": "The run, paused."},
        202: {"model": RunOut, "description": "The run, still pausing after `wait` seconds."},
        404: {"model": ErrorBody},
        409: {"model": ErrorBody},
    },
)
async def pause_run(request: Request, run_id: str, body: PauseIn, who: Caller) -> JSONResponse:
    """Pause a run, on whichever replica drives it. Waits up to ``wait`` seconds for the pause:
    200 with the paused run (its ``resume_token``), or 202 when it is still pausing."""
    forbid(who, "runs")
    service = service_of(request)
    record = await load_run(service, who, run_id)
    if not RunState(record.state).live:
        raise RunStateError(f"run {run_id} is {record.state}: only a live run can be paused")
    await note(request, who, "run.pause", run_id, kind=body.kind, keep_node=body.keep_node)
    asked = await service.orchestrator.request_pause(run_id, body.kind, body.reason, keep_node=body.keep_node)
    with anyio.move_on_after(body.wait):
        while RunState(record.state).live:
            await anyio.sleep(_PAUSE_POLL)
            record = await load_run(service, who, run_id)
    if RunState(record.state).live:
        return JSONResponse(run_body(who, record), 202)
    snapshots = await service.store.snapshots(run_id)
    unused = [s for s in snapshots if s.used_at is None]
    if record.state != RunState.PAUSED or not unused:
        await service.orchestrator.withdraw_pause(run_id, asked)
        raise RunStateError(f"run {run_id} ended {record.outcome or record.state} before it could pause")
    return JSONResponse(run_body(who, record, snapshots) | {"resume_token": unused[-1].token}, 200)


@router.post(
    "/runs/{run_id}/resume",
    response_model=None,
    responses={
        200: {"model": RunOut, "description": "The run, resumed."},
        404: {"model": ErrorBody},
        409: {"model": ErrorBody},
    },
)
async def resume_run(request: Request, run_id: str, body: ResumeIn, who: Caller) -> dict[str, Any]:
    """Resume a paused (or failed) run with a message, on its kept node or a fresh one."""
    forbid(who, "runs")
    service = service_of(request)
    record = await load_run(service, who, run_id)
    how = resumed_how(service, record, body)
    await note(request, who, "run.resume", run_id, **resumed_detail(body))
    run = await service.orchestrator.resume_run(run_id, **how)
    return run_body(who, await load_run(service, who, run.id))


def resumed_how(service: Service, record: RunRecord, body: ResumeIn) -> ResumeFields:
    """What a resume, a rewind or a fork of ``record`` asks of the library, once the
    operator's policy allows it.

    Raises:
        ServiceError: 422, a setting, an option or an environment variable is the operator's.
        ConfigError: ``agent_grace`` is over the service's, or an image of the message is not one.
    """
    check_settings(record.node_provider, body.settings, service.config.allow_settings)
    check_options(record.agent, body.options, service.config.allow_options)
    check_env(body.env, service.config.allow_env)
    _check_grace(body.agent_grace, service.config.agent_grace)
    return ResumeFields(
        message=prompt_of(body.message),
        model=body.model,
        options={**_options(body), **({"permission": body.permission} if body.permission else {})},
        provider_settings=body.settings,
        deadline=body.timeout,
        idle_timeout=body.idle_timeout,
        keep_node=body.keep_node,
        pause_after_turn=body.pause_after_turn,
        agent_grace=body.agent_grace,
    )


def resumed_detail(body: ResumeIn) -> dict[str, Any]:
    """What the audit keeps of a resume's, a rewind's or a fork's body: never a value of its
    settings, options or environment."""
    return {
        "model": body.model,
        "keep_node": body.keep_node,
        "settings": sorted(body.settings),
        "options": sorted(body.options),
        "env": sorted(body.env),
    }


@router.get(
    "/runs/{run_id}/events",
    response_class=Response,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "The run's events, as server-sent events.",
        },
        204: {"description": "Nothing after Last-Event-ID, and nobody drives the run: stop reconnecting."},
        404: {"model": ErrorBody},
    },
)
async def run_events(
    request: Request,
    run_id: str,
    *,
    who: Caller,
    after: Annotated[
        int, Query(ge=0, le=LAST_SEQ, description="Start after this sequence number (Last-Event-ID wins).")
    ] = 0,
    follow: Annotated[
        bool, Query(description="Keep the stream open for new events while the run is driven.")
    ] = True,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            pattern="^[0-9]{1,19}$",
            description="The last event's sequence number the client has (as `after`).",
        ),
    ] = None,
) -> Response:
    """The run's events as server-sent events: ``id`` is each event's sequence number, ``data``
    its JSON. A client that reconnects with ``Last-Event-ID`` gets exactly what it missed. The
    stream ends after a drive's ``run.finished`` (a paused run's too: a resume continues the
    sequence). Comment lines keep an idle stream alive."""
    forbid(who, "read")
    service = service_of(request)
    record = await load_run(service, who, run_id)
    if last_event_id is not None:
        if int(last_event_id) > LAST_SEQ:
            raise ServiceError(422, "invalid", "Last-Event-ID is past any event's sequence number")
        after = int(last_event_id)
    if not RunState(record.state).live and await service.store.last_event_seq(run_id) <= after:
        return Response(status_code=204)
    return event_stream(service, run_id, after=after, follow=follow)


@router.get(
    "/sessions",
    response_model=None,
    responses={200: {"model": list[SessionOut], "description": "The sessions."}},
)
async def list_sessions(
    request: Request, who: Caller, workspace: Annotated[str | None, Query()] = None
) -> list[dict[str, Any]]:
    """Workspaces' agent sessions (archived ones too)."""
    forbid(who, "read")
    named = None if workspace is None else workspace_name(who, workspace)
    sessions = await service_of(request).store.sessions(named)
    return [_session_body(who, s) for s in sessions if workspace_visible(who, s.workspace_id)]


@router.get(
    "/workspaces",
    response_model=None,
    responses={200: {"model": list[WorkspaceOut], "description": "The workspaces."}},
)
async def list_workspaces(request: Request, who: Caller) -> list[dict[str, Any]]:
    """Workspaces: each one's active agent session and its runs' count."""
    forbid(who, "read")
    service = service_of(request)
    sessions = [s for s in await service.store.sessions() if workspace_visible(who, s.workspace_id)]
    return _workspaces(who, sessions, await service.store.runs(tenant=who.only))


@router.get(
    "/workspaces/{workspace}",
    response_model=None,
    responses={
        200: {"model": WorkspaceDetailOut, "description": "The workspace."},
        404: {"model": ErrorBody},
    },
)
async def get_workspace(request: Request, workspace: str, who: Caller) -> dict[str, Any]:
    """A workspace: its sessions and its runs."""
    forbid(who, "read")
    service = service_of(request)
    named = workspace_name(who, workspace)
    sessions = await service.store.sessions(named) if workspace_visible(who, named) else []
    if not sessions:
        raise ServiceError(404, "workspace_not_found", f"no workspace {workspace}")
    runs = [r for r in await service.store.runs(tenant=who.only) if r.workspace_id == named]
    return _workspaces(who, sessions, runs)[0] | {
        "sessions": [_session_body(who, s) for s in sessions],
        "runs": [run_body(who, r) for r in runs],
    }


def _session_body(who: Principal, session: SessionRecord) -> dict[str, Any]:
    return dataclasses.asdict(session) | {"workspace_id": workspace_shown(who, session.workspace_id)}


def _workspaces(who: Principal, sessions: list[SessionRecord], runs: list[RunRecord]) -> list[dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for session in sessions:
        shown = workspace_shown(who, session.workspace_id)
        entry = found.setdefault(
            session.workspace_id, {"id": shown, "agent": None, "session_id": None, "runs": 0}
        )
        if session.state == "active":
            entry["agent"], entry["session_id"] = session.provider, session.id
    for run in runs:
        if run.workspace_id in found:
            found[run.workspace_id]["runs"] += 1
    return list(found.values())
