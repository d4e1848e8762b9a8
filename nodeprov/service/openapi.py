"""The service's OpenAPI document: FastAPI's, completed with the errors every operation may
answer (each an :class:`~.schemas.ErrorBody`), and, where a request names a provider, the
providers this service offers (an enum a generated client can check)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from .config import ServiceConfig
from .state import offered_providers

__all__ = ["document"]

_ERRORS = {
    400: "The request could not be read (a body that is not the JSON it claims to be).",
    401: "No valid token: none given, unknown or revoked.",
    403: "The token's scopes do not allow this; or, on an open service, a request from "
    "elsewhere than this machine.",
    404: "No such thing, or another tenant's (never confirmed).",
    413: "The body is larger than this service takes.",
    422: "A field is refused; the message names it (never its value).",
    429: "Too many failed attempts to authenticate from this address: wait Retry-After seconds.",
    502: "The provider's platform failed, or could not be reached (the message says which).",
    503: "The store did not answer in time, or this replica is stopping: try again (Retry-After).",
}
_BODIES = ("NodeBody", "RunIn", "PoolIn")
_ON_PLATFORMS = ("/v1/nodes", "/v1/providers", "/v1/pools", "/v1/runs")  # may reach a provider


def document(app: FastAPI, config: ServiceConfig) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (made once)."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        offered = offered_providers(config)
        for path, item in schema["paths"].items():
            for operation in item.values():
                _complete(operation, offered, platform=path.startswith(_ON_PLATFORMS))
        components = schema.get("components", {}).get("schemas", {})
        for name in _BODIES:
            _offer(components[name]["properties"]["provider"], offered)
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        app.openapi_schema = schema
    return app.openapi_schema


def _complete(operation: dict[str, Any], offered: list[str], *, platform: bool) -> None:
    parameters = operation.get("parameters", [])
    body = "requestBody" in operation
    codes = {502, 503} if platform else {503}
    if "security" in operation:
        codes |= {401, 403, 429}
    if body:
        codes |= {400, 413, 422}
    if parameters:
        codes.add(422)
    if any(parameter["in"] == "path" for parameter in parameters):
        codes.add(404)
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for code in sorted(codes):
        answer = operation["responses"].setdefault(str(code), {"description": _ERRORS[code]})
        answer["content"] = error  # FastAPI's own 422 body is never sent: the service's one is
    for parameter in parameters:
        if parameter["name"] == "provider":
            _offer(parameter["schema"], offered)


def _offer(schema: dict[str, Any], offered: list[str]) -> None:
    """Limits the text of ``schema`` (``string`` or ``string | null``) to ``offered``."""
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "string":
            branch["enum"] = offered
