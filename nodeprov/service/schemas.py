"""The bodies the service takes and gives: pydantic models, unknown fields refused, each
field documented (they make the OpenAPI document). Secrets (``env`` values, secret provider
settings) are taken in, never given back."""

from __future__ import annotations

import base64
import binascii
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import ConfigError
from ..node import NodeConfig
from ..prompts import Block, ImageBlock, Prompt, TextBlock

__all__ = [
    "ErrorBody",
    "ExecBody",
    "ForkIn",
    "ImageIn",
    "NodeBody",
    "NodeIn",
    "PauseIn",
    "PoolIn",
    "ResumeIn",
    "RewindIn",
    "RunIn",
    "TextIn",
]

_LONGEST = 366 * 86400  # the longest duration a body may give (a lifetime, a timeout), in seconds


_PAUSE_AFTER_TURN = (
    "When the agent returns its result, pause the run rather than finish it: a resume's message is "
    "then the conversation's next turn, on the same node (with keep_node) and agent session."
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """Text with NUL is refused wherever it is: neither store may hold it."""
        if (where := _nul_in(value)) is not None:
            raise ValueError(f"{where or 'a value'} holds a NUL character")
        return value


def _nul_in(value: Any, where: str = "") -> str | None:
    """Where in a JSON value a text (a key too) holds NUL; ``None`` when none does."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        path = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and "\x00" in key:
            return path
        if (found := _nul_in(item, path)) is not None:
            return found
    return None


class ErrorBody(BaseModel):
    """Every failure's body."""

    error: str = Field(description="A stable code: invalid, not_found, unauthorized, forbidden, ...")
    message: str = Field(description="What went wrong, on one line.")


class TextIn(_Body):
    type: Literal["text"]
    text: str


class ImageIn(_Body):
    type: Literal["image"]
    data: str = Field(
        description="The image's bytes, base64 (PNG, JPEG, GIF or WebP; the type is read from them)."
    )

    def block(self) -> ImageBlock:
        """Raises: ConfigError: not base64, or not an image."""
        try:
            raw = base64.b64decode(self.data, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError("an image block's data is not base64") from None
        return ImageBlock.from_bytes(raw)


PromptIn = Annotated[
    str | list[Annotated[TextIn | ImageIn, Field(discriminator="type")]],
    Field(description="The task: text, or text and image blocks."),
]


def prompt_of(given: str | list[TextIn | ImageIn]) -> Prompt:
    """The library's prompt for a body's.

    Raises:
        ConfigError: an image is not base64 or not an image.
    """
    if isinstance(given, str):
        return given
    blocks: list[Block] = [TextBlock(b.text) if isinstance(b, TextIn) else b.block() for b in given]
    return blocks


class NodeIn(_Body):
    """What a node is for (see the library's ``NodeConfig``)."""

    ttl_seconds: float | None = Field(
        default=None,
        gt=0,
        le=_LONGEST,
        allow_inf_nan=False,
        description="Hard lifetime in seconds; past it any reaper removes the node. "
        "Default: the service's (24 hours unless `nodeprov serve --node-ttl` says otherwise).",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels for the node's resources.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment of every process on the node. A run keeps it, so that a resume's fresh "
        "node gets it too: give a run's secrets in its `env` instead, which is never stored.",
    )
    session_id: str | None = Field(
        default=None, description="The workflow session the node serves (a label)."
    )

    def config(
        self, *, owner: str, default_ttl: float, node_id: str | None = None, key: str | None = None
    ) -> NodeConfig:
        """Raises: ConfigError: a label or an environment name is refused."""
        extra: dict[str, Any] = {}
        if node_id is not None:
            extra["node_id"] = node_id
        if key is not None:
            extra["provision_key"] = key
        try:
            return NodeConfig(
                owner=owner,
                ttl=timedelta(seconds=self.ttl_seconds or default_ttl),
                labels=self.labels,
                env=self.env,
                session_id=self.session_id,
                **extra,
            )
        except ValueError as error:
            raise ConfigError(_first_error(error)) from None


def _first_error(error: ValueError) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors(include_url=False)[0]
        return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
    return str(error)


class NodeBody(_Body):
    """A node to provision."""

    provider: str = Field(description="The provider (see GET /v1/providers).")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Provider settings, over those of the service's environment (NODEPROV_<PROVIDER>_*).",
    )
    node: NodeIn = Field(default_factory=NodeIn)


class ExecBody(_Body):
    """A command to run on a node."""

    command: list[str] = Field(
        min_length=1, description="The program and its arguments (never a shell string)."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment of the process (a secret: never echoed)."
    )
    cwd: str | None = Field(default=None, description="Working directory on the node.")
    stdin: str | None = Field(
        default=None, description="The process's whole standard input, base64. Default: none."
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=_LONGEST,
        allow_inf_nan=False,
        description="Stop the process after this many seconds.",
    )

    @field_validator("stdin")
    @classmethod
    def _base64(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("not base64") from None
        return value


class RunIn(_Body):
    """A run to start: the options of ``nodeprov run``."""

    prompt: PromptIn
    provider: str | None = Field(default=None, description="The provider of the run's node (or `pool`).")
    pool: str | None = Field(
        default=None,
        description="The warm pool to claim the run's node from (GET /v1/pools): its provider, settings "
        "and node template; when it has no node ready, one is made from them (or waited for: `pool_wait`).",
    )
    pool_wait: bool = Field(default=False, description="Wait for a node of an empty pool, not make one.")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Provider settings, over the service environment's. Secret ones are never stored.",
    )
    agent: str | None = Field(default=None, description="The agent; default: the one the model routes to.")
    model: str = Field(
        default="scripted", description="'scripted' for the built-in offline model, else a real model's name."
    )
    permission: Literal["read-only", "edit", "full"] | None = Field(
        default=None,
        description="What the agent may do. Default: full, except for a real model on a provider whose "
        "nodes are the service's own host, which must name one.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Other agent options (see GET /v1/agents), e.g. max_turns."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment of the agent (API keys go here): never stored, logged or echoed.",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="A JSON schema the agent's result must match."
    )
    workspace: str = Field(
        default="default", description="The workspace whose agent session the run continues."
    )
    keep_node: bool = Field(default=False, description="Keep the node when the run pauses, for its resume.")
    pause_after_turn: bool = Field(default=False, description=_PAUSE_AFTER_TURN)
    checkpoint: Literal["pause", "turn", "off"] = Field(
        default="pause",
        description="When the run checkpoints its workspace with its agent's session: at every pause (a "
        "resume on a fresh node gets the files back), after each turn too, or never.",
    )
    agent_grace: float | None = Field(
        default=None,
        ge=0,
        le=_LONGEST,
        allow_inf_nan=False,
        description="Seconds the agent runs on, kept, with nobody attached (0: not kept); at most the "
        "service's --agent-grace, which is the default.",
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=_LONGEST,
        allow_inf_nan=False,
        description="End the run as failed after this many seconds.",
    )
    idle_timeout: float | None = Field(
        default=None,
        gt=0,
        le=_LONGEST,
        allow_inf_nan=False,
        description="End the run as failed after this many seconds without progress.",
    )
    node: NodeIn = Field(default_factory=NodeIn)


class PoolIn(_Body):
    """A warm pool to make: a node template and how many of its nodes to keep ready."""

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,39}$", description="Lowercase letters, digits and '-', at most 40."
    )
    provider: str = Field(description="The provider of the pool's nodes.")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Provider settings, over the service environment's. Secret ones are never stored.",
    )
    size: int = Field(default=2, ge=0, le=1000, description="Ready nodes to keep.")
    max_age: float = Field(
        default=3600.0,
        gt=0,
        le=_LONGEST,
        allow_inf_nan=False,
        description="Seconds a ready node waits at most.",
    )
    refill_concurrency: int = Field(default=2, ge=1, le=64, description="Nodes made at once.")
    node: NodeIn = Field(default_factory=NodeIn)


class PauseIn(_Body):
    kind: Literal["human", "external", "system"] = Field(
        default="external", description="Why, for diagnostics."
    )
    reason: str = Field(default="", max_length=2000, description="Shown in events and the run's status.")
    keep_node: bool | None = Field(
        default=None, description="Keep the node for the resume. Default: as the run was started or resumed."
    )
    wait: float = Field(
        default=60, ge=0, le=600, description="Seconds to wait for the run to pause (0: do not wait)."
    )


class ResumeIn(_Body):
    message: PromptIn = "continue"
    model: str | None = Field(default=None, description="'scripted' or a model name; default: the run's own.")
    permission: Literal["read-only", "edit", "full"] | None = None
    options: dict[str, Any] = Field(default_factory=dict, description="Agent options over the run's own.")
    env: dict[str, str] = Field(
        default_factory=dict, description="The agent's environment again (never stored)."
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Provider settings over the run's stored ones (its secret ones again).",
    )
    keep_node: bool = Field(default=False, description="Keep the node when the run pauses again.")
    pause_after_turn: bool = Field(default=False, description=_PAUSE_AFTER_TURN)
    agent_grace: float | None = Field(
        default=None,
        ge=0,
        le=_LONGEST,
        allow_inf_nan=False,
        description="Seconds the agent runs on, kept, with nobody attached (0: not kept); at most the "
        "service's --agent-grace; default: the run's own.",
    )
    timeout: float | None = Field(default=None, gt=0, le=_LONGEST, allow_inf_nan=False)
    idle_timeout: float | None = Field(default=None, gt=0, le=_LONGEST, allow_inf_nan=False)


class ForkIn(ResumeIn):
    """A new run from a checkpoint of a run: what a resume takes, laid over the run's own."""

    checkpoint: str | None = Field(
        default=None,
        description="The checkpoint to fork from (GET /v1/runs/{run_id}/checkpoints); default: the latest.",
    )
    keep_node: bool = Field(default=False, description="Keep the new run's node when it pauses.")


class RewindIn(ResumeIn):
    """A resume from an earlier checkpoint of the run's own."""

    checkpoint: str = Field(description="The checkpoint to resume from (GET /v1/runs/{run_id}/checkpoints).")
