"""How the service answers a failure: one JSON body, ``{"error": CODE, "message": LINE}``,
with the status a client can act on. The library's exceptions map here, in one table."""

from __future__ import annotations

import logging

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route

from ..errors import (
    CheckpointError,
    CommandNotFoundError,
    ConfigError,
    DeadlineError,
    NodeFileError,
    NodeFileNotFoundError,
    NodeGoneError,
    NodePathError,
    NodeprovError,
    NodeSuspendedError,
    ProviderError,
    RunStateError,
    SpawnError,
    StoreError,
    TokenError,
    first_line,
)

__all__ = ["ServiceError", "problem_response", "status_of"]

logger = logging.getLogger("nodeprov.service")


class ServiceError(Exception):
    """A failure the service answers with ``status`` and a one-line ``message``."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


# Most specific first: the first match wins.
_STATUSES: list[tuple[type[NodeprovError], int, str]] = [
    (NodePathError, 400, "bad_path"),
    (NodeFileNotFoundError, 404, "file_not_found"),
    (NodeFileError, 409, "file_error"),
    (NodeGoneError, 404, "node_not_found"),
    (CommandNotFoundError, 422, "command_not_found"),
    (NodeSuspendedError, 409, "node_suspended"),
    (SpawnError, 502, "spawn_failed"),
    (TokenError, 409, "token_used"),
    (CheckpointError, 502, "checkpoint_failed"),
    (RunStateError, 409, "run_state"),
    (ConfigError, 422, "invalid"),
    (StoreError, 503, "store_unavailable"),
    (DeadlineError, 504, "deadline"),
    (ProviderError, 502, "provider_failed"),
]


def status_of(error: NodeprovError) -> tuple[int, str]:
    """The status and code the service answers ``error`` with."""
    for cls, status, code in _STATUSES:
        if isinstance(error, cls):
            return status, code
    return 500, "internal"


def problem_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": code, "message": first_line(message) or code}, status, headers=headers)


async def _problem(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ServiceError)  # noqa: S101 - narrows a type: an invariant, never a check of input
    return problem_response(error.status, error.code, error.message, error.headers)


async def _nodeprov_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, NodeprovError)  # noqa: S101 - narrows a type: an invariant, never a check of input
    status, code = status_of(error)
    if status >= 500:
        logger.warning("%s %s failed: %s", request.method, request.url.path, first_line(str(error)))
    return problem_response(status, code, str(error) or type(error).__name__)


async def _invalid_request(request: Request, error: Exception) -> JSONResponse:
    """A body that is not JSON, or does not fit its model: 422, the first problem on one line
    (never the input: it may hold a secret)."""
    assert isinstance(error, RequestValidationError)  # noqa: S101 - narrows a type: an invariant, never a check of input
    first = error.errors()[0] if error.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    if first.get("type") == "json_invalid":
        message = "the body is not valid JSON"
    elif tuple(first.get("loc", ())) == ("body",) and "json" not in request.headers.get("content-type", ""):
        message = "the body must be JSON, sent as Content-Type: application/json"
    else:
        message = f"{where or 'body'}: {first.get('msg', 'invalid')}"
    return problem_response(422, "invalid", message)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)  # noqa: S101 - narrows a type: an invariant, never a check of input
    codes = {400: "unreadable", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
    headers = dict(error.headers or {})
    if error.status_code == 405:  # every route of the path, not the first one's alone
        headers["Allow"] = ", ".join(sorted(_methods(request)))
    return problem_response(
        error.status_code, codes.get(error.status_code, "http_error"), str(error.detail), headers
    )


def _methods(request: Request) -> set[str]:
    """The methods some route takes at ``request``'s path."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods or set()
    return methods


HANDLERS = {
    ServiceError: _problem,
    NodeprovError: _nodeprov_error,
    RequestValidationError: _invalid_request,
    HTTPException: _http_error,
}
