"""Agents: the coding agents a run drives on a node, behind one contract.

An :class:`Agent` turns "run this coding agent with these options" into a process on a
node (through the node's spawn function, so over the platform's own exec channel) and a
stream of :mod:`messages <nodeprov.agents.messages>` in one model. The orchestrator, the
events and the CLI know agents only through this contract; agents register under the
``nodeprov.agents`` entry-point group (see :mod:`nodeprov.agents.registry`)::

    [project.entry-points."nodeprov.agents"]
    claude = "nodeprov.agents.claude:ClaudeAgent"

Three ship with nodeprov: ``claude`` (the Claude Code CLI through the Claude Agent SDK),
``codex`` (the OpenAI Codex CLI, ``codex exec --json``) and ``opencode`` (OpenCode,
``opencode run --format json``).

Pausing is not an agent's business: the workflow pauses every agent the same way (it
interrupts the turn, then aborts the session, and keeps the agent's session id); resuming
starts a new session with ``resume`` set to that id, after :meth:`Agent.import_state`
wrote the agent's session state onto a fresh node when the old node is gone.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Literal,
    NotRequired,
    Protocol,
    Self,
    TypedDict,
    TypeVar,
)

from pydantic import Field, ValidationError

from ..errors import ConfigError
from ..node import NodeHandle
from ..node.keeper import KeepOptions
from ..prompts import Block, ImageBlock, ImageLimits, Prompt, TextBlock, prompt_blocks
from ..settings import Settings, secret_field
from .messages import AgentText, ErrorMessage, Message, Notice, Result, Thinking, ToolResult, ToolUse

if TYPE_CHECKING:
    from ..store.entries import Fold  # the store is not loaded for a type

__all__ = [
    "Agent",
    "AgentOptions",
    "AgentSession",
    "AgentText",
    "Capabilities",
    "ErrorMessage",
    "Message",
    "ModelInfo",
    "Notice",
    "Permission",
    "Result",
    "SessionArchive",
    "StateKey",
    "Thinking",
    "ToolResult",
    "ToolUse",
]

Permission = Literal["read-only", "edit", "full"]
"""What the agent may do on its node, for every agent alike (the README's table gives each
agent's flags): ``read-only`` reads and plans, ``edit`` edits files in its working
directory, ``full`` does anything, commands included, without asking. Nobody answers
prompts on a node: what an agent would ask for is refused."""


class AgentOptions(Settings):
    """Base of every agent's options: frozen, unknown fields rejected. What a run keeps is
    :meth:`storable`: never ``env`` or any other field declared with
    :func:`~nodeprov.secret_field`.

    :attr:`caller_options` names the options a caller of a service (``nodeprov serve``) may
    give on its own: what the agent does and with which model. The others are the
    operator's (the HTTP API refuses them unless its operator allows them): what runs as
    the agent or beside it (``cli_path``, MCP servers) and where its model traffic goes (a
    model provider's endpoint)."""

    caller_options: ClassVar[frozenset[str]] = frozenset(
        {"model", "permission", "env", "cwd", "output_schema", "no_output_timeout", "images", "ship_cli"}
    )

    model: str | None = Field(default=None, description="Model id; default: the agent's own default.")
    permission: Permission = Field(default="edit", description="What the agent may do (see Permission).")
    env: dict[str, str] = secret_field(
        default_factory=dict,
        description="Environment of the agent process, over the node's base environment (API keys "
        "go here); a secret: never stored, logged or put in a process's arguments.",
    )
    cwd: str | None = Field(
        default=None, description="Working directory on the node, relative to its workdir; default: workdir."
    )
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="A JSON schema the turn's result must match; the result then carries the parsed "
        "value (Result.structured), or fails when the agent's output does not match.",
    )
    cli_path: str | None = Field(
        default=None,
        description="The agent's CLI on the node; default: the node's tool_paths entry for the agent's "
        "CLI, else its name on the node's PATH.",
    )
    no_output_timeout: float | None = Field(
        default=None,
        gt=0,
        description="Seconds the agent may wait on its model without saying anything (its model-API "
        "retry notices do not count; time a tool of the agent's runs does not count) before the turn "
        "ends with DeadlineError. None: no limit.",
    )
    images: Literal["refuse", "text-only"] = Field(
        default="refuse",
        description="A prompt with images for a model that cannot see them (its ModelInfo says so): "
        "refused with ConfigError, or reduced to its text blocks.",
    )
    ship_cli: bool = Field(
        default=False,
        description="Make this machine's CLI of the agent (Agent.local_cli) available on the run's node "
        "(NodeConfig.tools: mounted read-only or used in place), for a node image without it.",
    )


@dataclass(frozen=True)
class ModelInfo:
    """A model an agent knows, for a user interface to offer."""

    id: str
    name: str
    context_window: int
    tools: bool = True
    vision: bool = False


@dataclass(frozen=True)
class Capabilities:
    """What an agent can do. Pausing is not here: every agent pauses the same way."""

    streaming: bool
    """Messages arrive as the agent works, not only at the end of a turn."""
    structured_output: bool
    """It honours :attr:`AgentOptions.output_schema`."""
    acp: bool = False
    """It speaks the Agent Client Protocol (:mod:`nodeprov.agents.acp`): its file and terminal
    requests are served on the node, its permission requests by the run's permission."""


class StateKey(TypedDict):
    """Where a piece of an agent's session state is archived: the agent's ``project_key``
    (Claude: its project directory; Codex: its workspace's home), its session id, and a ``subpath``
    for each further file of the session. The Claude Agent SDK's ``SessionKey`` shape."""

    project_key: str
    session_id: str
    subpath: NotRequired[str]


class SessionArchive(Protocol):
    """Where an agent keeps its session state off the node (the store, for a run), so that
    the session can resume on another node. Entries are JSON objects, one per line of the
    agent's state files, in order; ``summarize`` (a :data:`~nodeprov.store.entries.Fold`)
    keeps the agent's summary of a session beside them, if its SDK lists sessions from one
    (Claude's)."""

    def add(self, key: StateKey, entries: list[dict[str, Any]], *, summarize: Fold | None = None) -> None:
        """Queue ``entries`` to be appended under ``key``; must not block."""

    async def flush(self) -> None:
        """Make every queued entry durable.

        Raises:
            StoreError: the archive could not be written.
        """

    async def load(self, key: StateKey) -> list[dict[str, Any]] | None:
        """The entries under ``key``, None if there are none."""

    async def subpaths(self, key: StateKey) -> list[str]:
        """The ``subpath`` values stored beside ``key``'s main entry, sorted."""

    async def replace(
        self, key: StateKey, entries: list[dict[str, Any]], *, summarize: Fold | None = None
    ) -> None:
        """Make ``entries`` all that ``key`` holds (durable when this returns)."""


class AgentSession(ABC):
    """One conversation of an agent on a node: use it as an async context manager, run
    turns with :meth:`turn`, one at a time.

    ``session_id`` is the agent's own id of the conversation (Claude: its session id;
    Codex: its thread id), set as soon as the agent says it; give it as ``resume`` to
    :meth:`Agent.session` to continue the conversation later.
    """

    session_id: str | None = None
    keeper: str | None = None
    """Where the agent's process of the turn runs kept on the node (its keeper's directory,
    :attr:`~nodeprov.node.keeper.KeptProcess.keeper`), once started with ``keep``: what
    :meth:`follow` re-attaches to from another control plane."""

    @abstractmethod
    def turn(self, prompt: Prompt) -> AsyncIterator[Message]:
        """Send ``prompt`` (text, or text and image blocks: :mod:`nodeprov.prompts`) and
        yield the agent's messages until the turn's :class:`Result` (the last message). A
        turn the agent ends without a result, or with output that is not its protocol,
        raises. The prompt goes through :meth:`Agent.prepare_prompt` first.

        Raises:
            ConfigError: the options are inconsistent, or the prompt is refused (see
                :meth:`Agent.prepare_prompt`).
            SpawnError, CommandNotFoundError: the agent could not be started on the node.
            AgentOutputError: the agent's output is malformed.
            AgentExitError: the agent exited without a result, or stopped answering.
            DeadlineError: the agent said nothing at all for longer than its options allow.
            NodeGoneError: the node went away.
        """

    def follow(self, keeper: str, skip: int) -> AsyncIterator[Message]:
        """Re-attach to the turn in progress of a kept agent (:attr:`keeper`, another
        session's, perhaps another control plane's) and yield its messages from the start of
        the turn, less the first ``skip`` (those the run has already), until the turn's
        :class:`Result`. Nothing is sent to the agent: its turn goes on where it is.

        Raises:
            ConfigError: this agent cannot re-attach.
            NodeGoneError: the keeper is gone (the agent's process ended and was released,
                or its grace passed), or the node is.
            AgentOutputError, AgentExitError, DeadlineError: as :meth:`turn`.
        """
        raise ConfigError(f"the {type(self).__name__} cannot re-attach to a kept agent")

    @abstractmethod
    async def interrupt(self) -> None:
        """Ask the agent to end the current turn early (politely: the turn then ends with a
        result). Does nothing between turns. May not be honoured: abort with :meth:`aclose`.

        Raises:
            AgentError: the agent could not be asked.
        """

    async def detach(self) -> None:
        """Leave a kept agent running (see ``keep`` of :meth:`Agent.session`): close the
        channel to its process, not the process, whose keeper's grace counts from now; a
        control plane re-attaches with :meth:`follow` and :attr:`keeper`. An agent that is
        not kept is stopped, as by :meth:`aclose`. Idempotent, shielded, bounded; never
        raises."""
        await self.aclose()

    @abstractmethod
    async def aclose(self) -> None:
        """Abort: stop the agent's processes (their whole process group) and release what
        the session holds. Idempotent, shielded from cancellation, bounded by the node's
        stop policy plus a few seconds. Never raises."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


OptionsT = TypeVar("OptionsT", bound=AgentOptions)


class Agent(ABC, Generic[OptionsT]):
    """A coding agent with its options; subclasses set the class attributes and implement
    :meth:`session`, :meth:`state_key`, :meth:`import_state` and :meth:`export_state`.

    Class attributes: ``name`` (its registered name), ``options_model``, ``cli_name`` (its
    CLI's name: the default command on a node, and its key in a node's ``tool_paths``),
    ``capabilities``, ``models`` (the models it knows), ``model_patterns`` (regular
    expressions, matched in full, of the model names routed to it; see
    :func:`nodeprov.agents.registry.route_model`), ``fallback`` (whether it takes the
    models no agent claims), ``image_limits`` (what its model API accepts of a prompt's
    images; None: it takes no images), and ``slow_imports`` (modules its sessions and
    state methods import on first use that take long to import, an SDK: a control plane
    imports them in a thread as soon as it knows the agent, beside the node's provisioning,
    and never on its event loop; see :func:`nodeprov.agents.registry.import_soon`), and
    ``state_summary`` (the :data:`~nodeprov.store.entries.Fold` of the summary its SDK lists
    sessions from, kept beside a session's archived state; None: it keeps none). The
    class itself imports nothing slow: choosing an agent and checking its options and
    prompts stay fast.
    """

    name: ClassVar[str]
    options_model: ClassVar[type[AgentOptions]]
    cli_name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    models: ClassVar[tuple[ModelInfo, ...]] = ()
    model_patterns: ClassVar[tuple[str, ...]] = ()
    fallback: ClassVar[bool] = False
    image_limits: ClassVar[ImageLimits | None] = None
    slow_imports: ClassVar[tuple[str, ...]] = ()
    state_summary: ClassVar[Fold | None] = None

    def __init__(self, options: OptionsT) -> None:
        self.options = options

    @classmethod
    def from_options(cls, options: AgentOptions | Mapping[str, Any] | None = None) -> Self:
        """The agent with ``options`` validated by its options model (a mapping, or an
        options object of the base or this agent's model).

        Raises:
            ConfigError: an option is unknown or invalid.
        """
        if isinstance(options, cls.options_model):
            return cls(options)  # type: ignore[arg-type]
        values = options.model_dump(exclude_unset=True) if isinstance(options, AgentOptions) else options
        try:
            return cls(cls.options_model(**dict(values or {})))  # type: ignore[arg-type]
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, each['loc'])) or 'options'}: {each['msg']}"
                for each in error.errors(include_url=False)
            )
            allowed = ", ".join(cls.options_model.model_fields)
            raise ConfigError(
                f"invalid options for agent {cls.name}: {problems} (options: {allowed})"
            ) from None

    @classmethod
    def local_cli(cls) -> str | None:
        """The agent's CLI on this machine (the control plane), if found: for a node that
        shares this machine's files, and for ``nodeprov agents``."""
        return None

    @classmethod
    def offline(cls, prompt: str) -> AbstractAsyncContextManager[dict[str, Any]]:
        """The options that run this agent offline: against the scripted server of the model
        API it speaks (:mod:`nodeprov.offline`), up while the context lasts and playing the
        built-in demo for ``prompt``. What ``nodeprov run --model scripted`` uses.

        Raises:
            ConfigError: this agent has no offline model.
        """
        raise ConfigError(f"the {cls.name} agent has no offline scripted model")

    def model_info(self) -> ModelInfo | None:
        """The :class:`ModelInfo` of the options' model among :attr:`models`, None for a
        model the agent does not list (or its default)."""
        return next((info for info in self.models if info.id == self.options.model), None)

    def limits_for_images(self) -> ImageLimits | None:
        """What the options' model API accepts of a prompt's images (None: no images):
        :attr:`image_limits`, for an agent whose models all speak one API."""
        return self.image_limits

    def prepare_prompt(self, prompt: Prompt) -> tuple[Block, ...]:
        """``prompt`` as the blocks this agent sends: checked before anything is provisioned
        (a run's start and resume) and again by every turn. Images go to a model that sees:
        a model :attr:`models` lists without ``vision``, or an agent without image limits,
        refuses them, or with ``images="text-only"`` in the options gets the text blocks
        alone. A model it does not list is taken to see (its API is the judge).

        Raises:
            ConfigError: one line: the images are refused, or break the API's limits
                (count, size, media type).
        """
        blocks = prompt_blocks(prompt)
        images = [block for block in blocks if isinstance(block, ImageBlock)]
        if not images:
            return blocks
        info, limits = self.model_info(), self.limits_for_images()
        if limits is None or (info is not None and not info.vision):
            if self.options.images == "text-only":
                return tuple(block for block in blocks if isinstance(block, TextBlock))
            model = f"model {info.id}" if info is not None else "it"
            raise ConfigError(
                f"the {self.name} agent cannot send images to {model}: use a model that sees them, "
                "or the option images='text-only' to send the prompt's text alone"
            )
        limits.check(images, f"the {self.name} agent's model API")
        return blocks

    def cli_on(self, node: NodeHandle) -> str:
        """The agent's CLI on ``node``: ``options.cli_path``, else the node's ``tool_paths``
        entry, else :attr:`cli_name` on the node's PATH."""
        return self.options.cli_path or node.tool_paths.get(self.cli_name, self.cli_name)

    @abstractmethod
    def session(
        self,
        node: NodeHandle,
        *,
        workspace: str = "default",
        resume: str | None = None,
        archive: SessionArchive | None = None,
        keep: KeepOptions | None = None,
    ) -> AgentSession:
        """A session of the agent on ``node`` for ``workspace`` (nothing starts until its
        first turn); ``resume`` continues the conversation of that session id, whose state
        must be on the node (it ran there, or :meth:`import_state` wrote it). With
        ``archive`` the session keeps its state there as it goes. An agent that keeps state
        in a home of its own keeps one per workspace, so that sessions of two workspaces on
        one node do not see each other.

        With ``keep``, the agent's processes run under a keeper on the node
        (:mod:`nodeprov.node.keeper`): a dropped channel is re-attached and the turn goes on,
        nothing of its messages lost or repeated; with no control plane attached the agent
        runs on for the keeper's grace. Without, the stdin guard stops the agent when its
        channel closes.

        Raises:
            ConfigError: the options cannot be used on this node.
        """

    @abstractmethod
    def state_key(self, node: NodeHandle, workspace: str = "default") -> str:
        """The ``project_key`` under which the session state of ``workspace``'s sessions on
        ``node`` is archived; the run keeps it for :meth:`import_state`."""

    @abstractmethod
    async def import_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> bool:
        """Write session ``session_id``'s state, archived under ``project_key`` (perhaps
        from another node), onto ``node`` where a resumed session looks for it. Returns
        whether there was any.

        Raises:
            NodeFileError, NodeGoneError: the node could not be written.
            StoreError: the archive could not be read.
        """

    def new_session_id(self) -> str:
        """A fresh id in the form of this agent's session ids: the id of a fork's copy of a
        session (:meth:`fork_state`). A random UUID unless the agent's ids look otherwise."""
        return str(uuid.uuid4())

    async def fork_state(
        self,
        session_id: str,
        new_id: str,
        project_key: str,
        source: SessionArchive,
        target: SessionArchive,
    ) -> bool:
        """Copy session ``session_id``'s state, as ``source`` holds it (a checkpoint's cut of
        the archive), into ``target`` as session ``new_id``, whose resume then continues the
        conversation where ``source`` stood while the original goes on unchanged (a fork).
        Returns whether there was any state to copy.

        Session ids are random tokens that appear in an agent's state only as themselves
        (an entry's ``sessionId``, a file name in a ``subpath``): the default copies every
        entry and subpath with ``session_id`` replaced by ``new_id`` wherever it appears.
        An agent whose state names its session otherwise overrides this.

        Raises:
            StoreError: either archive failed.
        """
        key: StateKey = {"project_key": project_key, "session_id": session_id}
        copied = False
        for subpath in ["", *await source.subpaths(key)]:
            entries = await source.load({**key, "subpath": subpath} if subpath else key)
            if not entries:
                continue
            renamed = json.loads(json.dumps(entries).replace(session_id, new_id))
            into: StateKey = {"project_key": project_key, "session_id": new_id}
            if subpath:
                into["subpath"] = subpath.replace(session_id, new_id)
            await target.replace(into, renamed, summarize=None if subpath else type(self).state_summary)
            copied = True
        return copied

    @abstractmethod
    async def export_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> None:
        """Before ``node`` goes: archive what its copy of the session's state holds beyond
        the archived one (never replacing a longer copy with a shorter one). Bounded; a
        node that cannot be read leaves the archive as it is.

        Raises:
            StoreError: the archive could not be written.
        """
