"""``/v1/providers`` and ``/v1/nodes``: providers and their readiness; nodes provisioned,
listed, read, destroyed; files streamed in and out; commands run.

**Exec is a request whose answer streams** (``POST /v1/nodes/{id}/exec``): the body names
the command, its environment and its whole stdin; the answer is newline-delimited JSON, a
line per chunk of output (``{"stream": "stdout"|"stderr", "data": BASE64}``) and a last line
with the exit status (``{"exit_code": N}``; a process killed by a signal is ``-SIGNAL``).
Such APIs' clients (a control plane running a build, a test, a linter) send a whole input
and read output as it comes; plain HTTP does that through every proxy and client library,
curl included, where a WebSocket needs its own client and an upgrade every proxy must let
through. A client that disconnects stops the process; so does the request's ``timeout``.

Nodes made through the API are owned by ``service:nodeprov``, which no reaper judges gone:
they outlive the replica that made them until destroyed or past their lifetime.

**Whose a node is.** A node made through the API is its caller's tenant's (``store.owners``,
written before the node is made), and only that tenant's callers (and an admin) find it;
every other node (a run's, a pool's, the CLI's) is found by an admin alone, to list and
look at: its files and processes are its run's, never the API's to read or run.

**Files** are the workspace's: a path is taken from the node's workdir and must stay in it
(no ``/proc``, no other process's environment, no credentials of the node's platform). The
files routes and exec need the ``nodes`` scope (a node's files may hold what its processes
were given); exec reaches the whole node, but a node holds only its own tenant's processes.
A file's mode is permission bits alone: never setuid, setgid or sticky.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import posixpath
import re
from collections.abc import AsyncGenerator
from contextlib import aclosing, nullcontext, suppress
from typing import Annotated, Any

import anyio
from anyio.abc import ByteReceiveStream, ObjectSendStream, TaskStatus
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from ..errors import ConfigError, NodeGoneError, NodePathError, NodeprovError
from ..fleet import readiness
from ..node import LABEL_EXPIRES_AT, NodeHandle, NodeInfo
from ..spawn import SpawnedProcess, SpawnOptions
from ..store import new_id
from .answers import DestroyedNodeOut, FileWrittenOut, NodeListOut, NodeOut, ProviderOut
from .audit import command_of, note
from .auth import Principal, forbid
from .idempotency import claim_key, fingerprint
from .policy import check_settings
from .problems import ServiceError
from .runs import IdempotencyKey
from .schemas import ErrorBody, ExecBody, NodeBody
from .state import Caller, Service, service_of
from .streams import PumpedResponse
from .tenancy import node_tenant

__all__ = ["FILE_ROUTE", "router"]

router = APIRouter(prefix="/v1", responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}})

FILE_ROUTE = re.compile(r"^/v1/nodes/[^/]+/files$")
"""The route whose request bodies are files (a limit of their own)."""

_PROBE_TIMEOUT = 10.0
ProviderQuery = Annotated[str | None, Query(description="The node's provider (default: whichever has it).")]


@router.get(
    "/providers",
    response_model=None,
    responses={200: {"model": list[ProviderOut], "description": "The providers."}},
)
async def list_providers(request: Request, who: Caller) -> list[dict[str, Any]]:
    """The providers this service offers, each probed (with the service's settings for it)."""
    forbid(who, "read")
    names = service_of(request).allowed_providers()
    rows: list[dict[str, Any]] = [{} for _ in names]

    async def check(index: int, name: str) -> None:
        rows[index] = (await readiness(name, probe_timeout=_PROBE_TIMEOUT)).as_json()

    async with anyio.create_task_group() as tg:
        for index, name in enumerate(names):
            tg.start_soon(check, index, name)
    return rows


@router.get(
    "/providers/{name}",
    response_model=None,
    responses={200: {"model": ProviderOut, "description": "The provider."}, 404: {"model": ErrorBody}},
)
async def get_provider(request: Request, name: str, who: Caller) -> dict[str, Any]:
    """One provider: its requirements, and whether it is ready."""
    forbid(who, "read")
    if name not in service_of(request).allowed_providers():
        raise ServiceError(404, "provider_not_found", f"no provider {name!r} here")
    return (await readiness(name, probe_timeout=_PROBE_TIMEOUT)).as_json()


def node_body(node: NodeHandle) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "provider": node.provider,
        "state": node.state.value,
        "workdir": node.workdir,
        "labels": dict(node.labels),
    }


def _info_body(info: NodeInfo) -> dict[str, Any]:
    return {
        "node_id": info.node_id,
        "provider": info.provider,
        "state": info.state,
        "labels": dict(info.labels),
    }


@router.post(
    "/nodes",
    status_code=201,
    response_model=None,
    responses={
        201: {"model": NodeOut, "description": "The node, provisioned."},
        200: {"model": NodeOut, "description": "The node an earlier request with this Idempotency-Key made."},
        409: {"model": ErrorBody},
        422: {"model": ErrorBody},
    },
)
async def provision(
    request: Request, body: NodeBody, who: Caller, key: IdempotencyKey = None
) -> JSONResponse:
    """Provision a node. It lives until destroyed or past its lifetime (``node.ttl_seconds``)."""
    forbid(who, "nodes")
    service = service_of(request)
    service.check_provider(body.provider)
    check_settings(body.provider, body.settings, service.config.allow_settings)
    provider = await service.fleet.provider(body.provider, body.settings)
    node_id, provision_key = None, None
    if key is not None:
        claim = await claim_key(
            service.store,
            who,
            key,
            kind="node",
            print_=fingerprint("node", body),
            new_id=new_id("np").replace("_", "-").lower(),
            holder=service.orchestrator.owner,
        )
        if claim.done:
            return JSONResponse(claim.response(), 200, headers={"Idempotent-Replayed": "true"})
        # The same id and key as every attempt: one cut short by a dead replica is adopted.
        node_id, provision_key = claim.resource_id, claim.record.fingerprint + claim.resource_id
    config = body.node.config(
        owner=service.owner, default_ttl=service.config.node_ttl, node_id=node_id, key=provision_key
    )
    expires = config.resource_labels().get(LABEL_EXPIRES_AT)
    owner = await service.store.owners.add(
        "node", config.node_id, who.tenant, provider=body.provider, expires_at=expires
    )
    if owner.tenant != who.tenant:  # an id another tenant's retry holds: never touched
        raise ServiceError(409, "node_exists", f"node {config.node_id} exists already")
    await note(
        request,
        who,
        "node.provision",
        config.node_id,
        provider=body.provider,
        settings=sorted(body.settings),
        env=sorted(body.node.env),
    )
    try:
        node = await provider.provision(config)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await service.store.owners.remove("node", config.node_id)  # undone: nothing is left
            if key is not None:
                await service.store.idempotency.forget(who.id, key)  # a retry starts afresh
        raise
    service.remember(node)
    answer = node_body(node)
    service.metrics.nodes_made.labels(body.provider, "provision").inc()
    if key is not None:
        await service.store.idempotency.complete(who.id, key, json.dumps(answer))
    return JSONResponse(answer, 201)


@router.get(
    "/nodes", response_model=None, responses={200: {"model": NodeListOut, "description": "The nodes."}}
)
async def list_nodes(request: Request, who: Caller, provider: ProviderQuery = None) -> dict[str, Any]:
    """Nodes of every offered provider (or one): ``notes`` name providers not set up here,
    ``failures`` those that could not be asked."""
    forbid(who, "read")
    service = service_of(request)
    if provider is not None:
        service.check_provider(provider)
    nodes, notes, failures = await service.fleet.list_nodes(provider)
    offered = service.allowed_providers()
    mine = None if who.allows("admin") else await service.store.owners.of("node", who.tenant)
    return {
        "nodes": [
            _info_body(info)
            for info in nodes
            if info.provider in offered and (mine is None or info.node_id in mine)
        ],
        "notes": [note for note in notes if note.split(":")[0] in offered],
        "failures": [failure for failure in failures if failure.split(":")[0] in offered],
    }


async def _find(
    service: Service, who: Principal, node_id: str, provider: str | None, *, any_node: bool = False
) -> NodeHandle:
    """The node, from ``provider``, or the one this replica last found it on, or whichever
    offered provider has it (asking each in turn costs a call to every platform); if it is
    within the caller's reach (see the module): one the API made for its tenant, or any
    node for an admin ``any_node`` lets look at.

    Raises:
        NodeGoneError: no such node, or not within reach (never confirmed to exist).
    """
    tenant = await node_tenant(service.store, node_id)
    if not (who.sees(tenant) if tenant is not None else any_node and who.allows("admin")):
        raise NodeGoneError(f"no node {node_id}")
    if provider is not None:
        service.check_provider(provider)
    elif (known := service.node_providers.get(node_id)) is not None:
        with suppress(NodeGoneError):
            return await service.fleet.find(node_id, known)
    node = await service.fleet.find(node_id, provider)
    if node.provider not in service.allowed_providers():
        raise NodeGoneError(f"no node {node_id}")
    service.remember(node)
    return node


@router.get(
    "/nodes/{node_id}",
    response_model=None,
    responses={200: {"model": NodeOut, "description": "The node."}, 404: {"model": ErrorBody}},
)
async def get_node(
    request: Request, node_id: str, who: Caller, provider: ProviderQuery = None
) -> dict[str, Any]:
    """A node."""
    forbid(who, "read")
    return node_body(await _find(service_of(request), who, node_id, provider, any_node=True))


@router.delete(
    "/nodes/{node_id}",
    response_model=None,
    responses={
        200: {"model": DestroyedNodeOut, "description": "The node, destroyed."},
        404: {"model": ErrorBody},
    },
)
async def destroy(
    request: Request, node_id: str, who: Caller, provider: ProviderQuery = None
) -> dict[str, Any]:
    """Destroy a node and everything on it."""
    forbid(who, "nodes")
    service = service_of(request)
    node = await _find(service, who, node_id, provider)
    await note(request, who, "node.destroy", node_id, provider=node.provider)
    await node.destroy()
    await service.store.owners.remove("node", node_id)
    service.metrics.nodes_made.labels(node.provider, "destroy").inc()
    return node_body(node) | {"destroyed": True}


@router.get(
    "/nodes/{node_id}/files",
    response_class=Response,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes."},
        400: {"model": ErrorBody},
        404: {"model": ErrorBody},
    },
)
async def download(
    request: Request,
    node_id: str,
    who: Caller,
    path: Annotated[str, Query(description="The file on the node (relative: from its workdir).")],
    provider: ProviderQuery = None,
) -> Response:
    """A file of the node's workdir, streamed."""
    forbid(who, "nodes")
    node = await _find(service_of(request), who, node_id, provider)
    _in_workdir(node, path)  # elsewhere: 400
    await note(request, who, "node.read_file", node_id, path=path)

    async def pump(sink: ObjectSendStream[bytes], task_status: TaskStatus[None]) -> None:
        async with node.read_file(path) as chunks:  # a missing file: 404, before the answer starts
            task_status.started()
            async for chunk in chunks:
                await sink.send(chunk)

    return PumpedResponse(pump, "application/octet-stream")


@router.put(
    "/nodes/{node_id}/files",
    status_code=201,
    response_model=None,
    responses={
        201: {"model": FileWrittenOut, "description": "The file, written."},
        400: {"model": ErrorBody},
        413: {"model": ErrorBody},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The file's bytes (at most the service's max_file).",
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload(
    request: Request,
    node_id: str,
    *,
    who: Caller,
    path: Annotated[str, Query(description="Where on the node (relative: from its workdir).")],
    mode: Annotated[
        str,
        Query(pattern="^0?[0-7]{3}$", description="Octal permission bits (never setuid, setgid or sticky)."),
    ] = "0600",
    provider: ProviderQuery = None,
) -> dict[str, Any]:
    """Write the request body to a file of the node's workdir, streamed (replaced whole, or
    not at all)."""
    forbid(who, "nodes")
    node = await _find(service_of(request), who, node_id, provider)
    full = _in_workdir(node, path)
    size = 0
    await note(request, who, "node.write_file", node_id, path=path, mode=mode)

    async def chunks() -> AsyncGenerator[bytes]:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            yield chunk

    async with aclosing(chunks()) as data:
        await node.write_file(path, data, mode=int(mode, 8))
    return {"node_id": node.node_id, "path": full, "size": size}


@router.post(
    "/nodes/{node_id}/exec",
    response_class=Response,
    responses={
        200: {
            "content": {"application/x-ndjson": {}},
            "description": "JSON lines: {stream: stdout|stderr, data: BASE64} per chunk of output, then "
            "{exit_code: N} (-SIGNAL when a signal killed it), or {error: timeout, message} past `timeout`.",
        },
        404: {"model": ErrorBody},
        422: {"model": ErrorBody},
    },
)
async def exec_on(
    request: Request, node_id: str, body: ExecBody, who: Caller, provider: ProviderQuery = None
) -> Response:
    """Run a command on the node; its output streams back as JSON lines, then its exit status
    (see the module)."""
    forbid(who, "nodes")
    node = await _find(service_of(request), who, node_id, provider)
    try:
        options = SpawnOptions(body.command[0], body.command[1:], cwd=body.cwd, env=body.env)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    command = command_of(body.command)
    await note(request, who, "node.exec", node_id, command=command, cwd=body.cwd, env=sorted(body.env))

    async def pump(sink: ObjectSendStream[bytes], task_status: TaskStatus[None]) -> None:
        async with await node.spawn(options) as process:  # not there: an error status, not a stream
            task_status.started()
            try:
                with anyio.fail_after(body.timeout) if body.timeout else nullcontext():
                    await _relay(process, body.stdin, sink)
            except TimeoutError:
                _stop_at_once(process)
                await sink.send(
                    _line({"error": "timeout", "message": f"the command ran past {body.timeout:g} s"})
                )
            except BaseException:
                _stop_at_once(process)  # its client left: nobody will give it more input
                raise

    return PumpedResponse(pump, "application/x-ndjson")


async def _relay(process: SpawnedProcess, stdin: str | None, sink: ObjectSendStream[bytes]) -> None:
    """Feed ``stdin`` (base64) to ``process``, send its output as lines, then its exit status."""

    async def feed() -> None:
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, NodeprovError):
            if stdin:
                await process.stdin.send(base64.b64decode(stdin))
            await process.stdin.aclose()

    async def copy(name: str, source: ByteReceiveStream) -> None:
        async for chunk in source:
            await sink.send(_line({"stream": name, "data": base64.b64encode(chunk).decode()}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(feed)
        tg.start_soon(copy, "stdout", process.stdout)
        tg.start_soon(copy, "stderr", process.stderr)
    await sink.send(_line({"exit_code": await process.wait()}))


def _stop_at_once(process: SpawnedProcess) -> None:
    """Stop ``process`` as its stop policy says, without the grace it would give its stdin."""
    process.stop_policy = dataclasses.replace(process.stop_policy, eof_grace=0.0)


def _in_workdir(node: NodeHandle, path: str) -> str:
    """``path`` on the node (see :meth:`NodeHandle.node_path`), if it is in its workdir.

    Raises:
        NodePathError: it is not (or is refused by the node).
    """
    full = node.node_path(path)
    workdir = posixpath.normpath(node.workdir)
    if full != workdir and not full.startswith(workdir.rstrip("/") + "/"):
        raise NodePathError(
            f"{path!r} is outside node {node.node_id}'s workdir ({workdir}): files are the workspace's"
        )
    return full


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode() + b"\n"
