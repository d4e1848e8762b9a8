"""The bodies the service gives back: pydantic models, each field documented, for the
OpenAPI document and the clients generated from it. Secrets are never among them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["AuditEntryOut"]


class AuditEntryOut(BaseModel):
    """One thing asked of the API (see ``GET /v1/audit``)."""

    seq: int = Field(description="Orders the entries; page with ``after`` set to the last one read.")
    at: str = Field(description="When it was asked (ISO 8601, UTC).")
    tenant: str = Field(description="The tenant of the token that asked.")
    token_id: str = Field(description="The token's id (never its secret).")
    token_name: str = Field(description="The token's name.")
    action: str = Field(description="run.start, run.pause, run.resume, node.provision, node.exec, ...")
    resource: str = Field(description="The run's or node's id, or the pool's name.")
    detail: dict[str, Any] = Field(
        description="What was asked: providers, agents, paths, a command; names of settings, options "
        "and environment variables, never their values."
    )
