"""The bodies the service gives back: pydantic models, each field documented, for the
OpenAPI document and the clients generated from it. No secret is among them but a paused
run's single-use resume token, given to whoever paused it.

Most routes build their bodies as plain JSON (``run_body``, ``node_body``, ``pool_body``)
and declare these models in their ``responses``: the document describes what they return
without the answer being remade through a model."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..node import NodeState
from ..runs import RunState

__all__ = [
    "AgentOut",
    "AuditEntryOut",
    "CheckpointOut",
    "DestroyedNodeOut",
    "DiffOut",
    "FileWrittenOut",
    "NodeListOut",
    "NodeOut",
    "PausedRunOut",
    "PoolOut",
    "ProviderOut",
    "RunDetailOut",
    "RunOut",
    "SessionOut",
    "StatusOut",
    "WorkspaceDetailOut",
    "WorkspaceOut",
]


class StatusOut(BaseModel):
    """The process's state (``/healthz``, ``/readyz``)."""

    status: str = Field(description="ok (it answers) or ready (it can serve).")


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


class RequirementOut(BaseModel):
    """One thing a provider needs on the service's host (a tool, a credential)."""

    name: str = Field(description="What is needed.")
    ok: bool = Field(description="Whether it is there.")
    detail: str = Field(description="Where it was found, or how to get it.")


class ProviderOut(BaseModel):
    """A provider and whether it can make nodes here (probed with the service's settings)."""

    name: str = Field(description="The provider's name.")
    ready: bool = Field(description="Its requirements are met and its platform answers.")
    error: str = Field(description="Why it is not ready; empty when it is, or when a requirement is missing.")
    requirements: list[RequirementOut] = Field(description="What it needs, and whether each is there.")


class CapabilitiesOut(BaseModel):
    """What an agent can do."""

    streaming: bool = Field(description="Messages arrive as the agent works, not only at a turn's end.")
    structured_output: bool = Field(description="It honours the `output_schema` option.")
    images: bool = Field(description="It takes image blocks in a prompt.")
    acp: bool = Field(
        description="It speaks the Agent Client Protocol (its fs and terminal requests served on the node)."
    )


class ModelOut(BaseModel):
    """A model an agent knows."""

    id: str = Field(description="The name to give as a run's `model`.")
    name: str = Field(description="Its name for people.")
    context_window: int = Field(description="Tokens of context.")
    tools: bool = Field(description="It calls tools.")
    vision: bool = Field(description="It reads images.")


class AgentOut(BaseModel):
    """An installed agent."""

    name: str = Field(description="The agent's name (a run's `agent`).")
    default: bool = Field(description="It runs the models no other agent's patterns match.")
    cli_name: str = Field(description="Its CLI's name.")
    local_cli: str | None = Field(description="Where its CLI is on the service's host; null: not found.")
    model_patterns: list[str] = Field(description="Regular expressions of the model names routed to it.")
    capabilities: CapabilitiesOut = Field(description="What it can do.")
    models: list[ModelOut] = Field(description="The models it knows.")


_LABELS = "The labels of the node's resources."


class NodeOut(BaseModel):
    """A node."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "node_id": "np-feab6841c2c8",
                    "provider": "docker",
                    "state": "active",
                    "workdir": "/workspace",
                    "labels": {
                        "team": "infra",
                        "nodeprov.node-id": "np-feab6841c2c8",
                        "nodeprov.owner": "service:nodeprov",
                        "nodeprov.expires-at": "2025-03-29T09:14:02+00:00",
                    },
                }
            ]
        }
    )

    node_id: str = Field(description="The node's id.")
    provider: str = Field(description="The provider that made it.")
    state: NodeState = Field(description="Where the node stands.")
    workdir: str = Field(description="Its working directory: where files' relative paths start.")
    labels: dict[str, str] = Field(description=_LABELS)


class DestroyedNodeOut(NodeOut):
    """A node just destroyed."""

    destroyed: bool = Field(description="Always true: the node and everything on it are gone.")


class NodeInfoOut(BaseModel):
    """A node as its provider's platform lists it."""

    node_id: str = Field(description="The node's id.")
    provider: str = Field(description="The provider that has it.")
    state: str = Field(description="The platform's own word for its state (running, exited, ...).")
    labels: dict[str, str] = Field(description=_LABELS)


class NodeListOut(BaseModel):
    """The nodes of the offered providers."""

    nodes: list[NodeInfoOut] = Field(description="The nodes within the caller's reach.")
    notes: list[str] = Field(description="Providers not set up here, each 'PROVIDER: why'.")
    failures: list[str] = Field(description="Providers that could not be asked, each 'PROVIDER: why'.")


class FileWrittenOut(BaseModel):
    """A file written on a node."""

    node_id: str = Field(description="The node's id.")
    path: str = Field(description="The file's absolute path on the node.")
    size: int = Field(description="Bytes written.")


class SnapshotOut(BaseModel):
    """What a paused (or failed) run's resume starts from (its single-use token is not shown)."""

    run_id: str = Field(description="The run's id.")
    node_id: str | None = Field(description="The run's node when it was taken; null: it had none.")
    node_kept: bool = Field(description="The node was kept for the resume.")
    provider: str = Field(description="The provider of the run's node.")
    agent_session_id: str | None = Field(description="The agent's session to resume; null: none yet.")
    project_key: str | None = Field(description="Where the agent's session state is archived.")
    state: RunState = Field(description="The run's state when it was taken.")
    pause_kind: Literal["human", "external", "system"] = Field(description="Who asked for the pause.")
    reason: str = Field(description="Why it was paused.")
    created_at: str = Field(description="When it was taken (ISO 8601, UTC).")
    used_at: str | None = Field(description="When a resume used it; null: not yet.")
    agent: str = Field(description="The agent that runs the run.")
    resumable: bool = Field(description="It is unused: a resume may start from it.")


class RunOut(BaseModel):
    """A run: its task, where it runs and how it stands."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "run-8b7b3397d5d03b8d",
                    "session_id": "ses-7844da7ce8c53116",
                    "workspace_id": "default",
                    "prompt": "Fix the failing test in tests/test_io.py",
                    "node_provider": "docker",
                    "agent_options": {"model": "claude-sonnet-4-5", "permission": "edit", "ship_cli": False},
                    "state": "running",
                    "outcome": None,
                    "error": None,
                    "node_id": "np-7db05ca778ae",
                    "agent_session_id": None,
                    "project_key": None,
                    "owner": "lease:lease-58ee2afe25799d24",
                    "created_at": "2025-03-28T09:14:02.118000+00:00",
                    "updated_at": "2025-03-28T09:14:05.402113+00:00",
                    "agent": "claude",
                    "node_secret_fields": [],
                    "node_config": {"ttl": "P1D", "labels": {}, "env": {}, "workdir": None, "tools": {}},
                    "prompt_blocks": [],
                    "agent_keeper": None,
                    "settings": {"image": "ghcr.io/acme/dev:latest"},
                    "forked_from": None,
                    "forked_at": None,
                }
            ]
        }
    )

    id: str = Field(description="The run's id.")
    session_id: str = Field(description="The workspace's agent session the run continues.")
    workspace_id: str = Field(description="Its workspace, as the caller names it.")
    prompt: str = Field(description="The prompt's text.")
    node_provider: str = Field(description="The provider of the run's node.")
    agent_options: dict[str, Any] = Field(description="The agent's options, less their secrets.")
    state: RunState = Field(description="Where the run stands.")
    outcome: str | None = Field(description="ok, paused or error once nobody drives it; null before.")
    error: str | None = Field(description="Why it failed; null unless it did.")
    node_id: str | None = Field(description="Its node; null before it has one.")
    agent_session_id: str | None = Field(description="The agent's own session id, once the agent says it.")
    project_key: str | None = Field(description="Where its agent's session state is archived.")
    owner: str = Field(description="The control plane that drives it (lease:ID).")
    created_at: str = Field(description="When it was started (ISO 8601, UTC).")
    updated_at: str = Field(description="When it last changed (ISO 8601, UTC).")
    agent: str = Field(description="The agent that runs it.")
    node_secret_fields: list[str] = Field(description="Names of the secret provider settings it was given.")
    node_config: dict[str, Any] = Field(
        description="What its node is made with (lifetime, labels, env, workdir, tools); empty for a pool's."
    )
    prompt_blocks: list[dict[str, Any]] = Field(
        description="A prompt of blocks: text ones, and images by reference; empty for a prompt of text."
    )
    agent_keeper: str | None = Field(
        description="Where the agent's process is kept on the node while driven."
    )
    settings: dict[str, Any] = Field(description="The provider's settings, less their secrets.")
    forked_from: str | None = Field(
        description="The run it was forked from (POST /v1/runs/{run_id}/fork); null: not a fork."
    )
    forked_at: str | None = Field(description="The checkpoint of that run it began at; null: not a fork.")


class RunDetailOut(RunOut):
    """A run with its snapshots: whether, and from what, it may be resumed."""

    snapshots: list[SnapshotOut] = Field(description="Its snapshots, oldest first.")
    resumable: bool = Field(description="It is paused or failed, with an unused snapshot: it may be resumed.")


class PausedRunOut(RunDetailOut):
    """A run just paused."""

    resume_token: str = Field(
        description="Its latest unused snapshot's single-use token (the library's Orchestrator.resume)."
    )


class PoolNodeOut(BaseModel):
    """The template of a pool's nodes."""

    ttl_seconds: float | None = Field(description="Each node's lifetime in seconds; null: none.")
    labels: dict[str, str] = Field(description="Extra labels of each node's resources.")
    env_names: list[str] = Field(
        description="Names of the environment variables its nodes get (never values)."
    )


class PoolOut(BaseModel):
    """A warm pool: its template, and how it is kept."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "ci",
                    "provider": "docker",
                    "size": 2,
                    "max_age": 3600.0,
                    "refill_concurrency": 2,
                    "state": "active",
                    "ready": 2,
                    "starting": 0,
                    "holder": "lease:lease-58ee2afe25799d24",
                    "holder_name": "nodeprov serve on api-1 pid 4121",
                    "held": True,
                    "error": None,
                    "retry_in": None,
                    "settings": {"image": "ghcr.io/acme/dev:latest"},
                    "node": {"ttl_seconds": 86400.0, "labels": {"team": "infra"}, "env_names": ["CI"]},
                }
            ]
        }
    )

    name: str = Field(description="The pool's name, as the caller names it.")
    provider: str = Field(description="The provider of its nodes.")
    size: int = Field(description="Ready nodes to keep.")
    max_age: float = Field(description="Seconds a ready node waits at most; older ones are replaced.")
    refill_concurrency: int = Field(description="Nodes made at once.")
    state: Literal["active", "removing"] = Field(description="removing once a DELETE asked for it.")
    ready: int = Field(description="Nodes ready to be claimed.")
    starting: int = Field(description="Nodes being made.")
    holder: str | None = Field(description="The control plane that keeps it (lease:ID); null: none yet.")
    holder_name: str | None = Field(description="Who that is: its holder, host and pid.")
    held: bool | None = Field(description="Whether its keeper lives; null when the store cannot tell.")
    error: str | None = Field(description="Why the last refill failed; null once one succeeded.")
    retry_in: float | None = Field(description="Seconds until the next refill after a failure.")
    settings: dict[str, Any] = Field(description="The provider's settings it stores (never a secret).")
    node: PoolNodeOut = Field(description="Its nodes' template.")


class SessionOut(BaseModel):
    """A workspace's agent session."""

    id: str = Field(description="The session's id.")
    workspace_id: str = Field(description="Its workspace, as the caller names it.")
    provider: str = Field(description="The agent it is a session of.")
    provider_session_id: str | None = Field(description="The agent's own session id, once known.")
    state: Literal["active", "archived"] = Field(description="A workspace has one active session at most.")
    created_at: str = Field(description="When it began (ISO 8601, UTC).")
    archived_at: str | None = Field(description="When it was archived; null while active.")


class _Workspace(BaseModel):
    id: str = Field(description="The workspace, as the caller names it.")
    agent: str | None = Field(description="The agent of its active session; null: none active.")
    session_id: str | None = Field(description="Its active session's id; null: none active.")


class WorkspaceOut(_Workspace):
    """A workspace: its active agent session and its runs' count."""

    runs: int = Field(description="How many runs it has.")


class WorkspaceDetailOut(_Workspace):
    """A workspace: its sessions and its runs."""

    sessions: list[SessionOut] = Field(description="Its agent sessions, archived ones too.")
    runs: list[RunOut] = Field(description="Its runs, oldest first.")


class CheckpointOut(BaseModel):
    """A checkpoint of a run: its workspace and its agent's session at one moment."""

    id: str = Field(description="The checkpoint's id.")
    run_id: str = Field(description="The run it is of.")
    seq: int = Field(description="Its place among the run's checkpoints, from 1.")
    turn: int = Field(description="The turns the run had begun when it was taken.")
    reason: Literal["pause", "turn", "request", "fork", "rewind"] = Field(
        description="Why it was taken: at a pause, after a turn, on request; or where a fork or a rewind "
        "began (another checkpoint's workspace, its parent)."
    )
    created_at: str = Field(description="When it was recorded (ISO 8601, UTC).")
    files: int = Field(description="Files in the workspace.")
    size: int = Field(description="Their bytes, together.")
    stored: int = Field(description="Bytes it added to the object store (what changed, and its manifest).")
    changed: dict[str, Any] = Field(
        description="Paths added, modified and removed since the run's checkpoint before: their counts, "
        "and the first 50 of each under paths."
    )
    parent: str | None = Field(
        description="The checkpoint before (a fork's first: the original run's it began at); null: none."
    )
    agent_session_id: str | None = Field(description="The agent's session it holds.")


class DiffOut(BaseModel):
    """What changed in a run's workspace from one checkpoint to another."""

    added: list[str] = Field(description="Paths added.")
    modified: list[str] = Field(description="Paths whose content, mode, kind or target changed.")
    removed: list[str] = Field(description="Paths removed.")
    binary: list[str] = Field(description="Changed files not shown as text (not UTF-8, or over 1 MiB).")
    patches: list[str] = Field(description="A unified diff of each text file that changed, in path order.")
