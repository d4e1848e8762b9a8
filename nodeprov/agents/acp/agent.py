"""The agents that speak ACP: :class:`AcpAgent`, what each shares (a private home per
workspace on the node, a session driven by :class:`~nodeprov.agents.acp.session.AcpSession`),
and :class:`ConfiguredAcpAgent`, registered as ``acp``: any ACP agent, named by its options
(its command, how its model is chosen, where it keeps its sessions)."""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Self, TypeVar

from pydantic import Field, model_validator

from ...node import NodeHandle
from ...node.keeper import KeepOptions
from ...prompts import ANTHROPIC_IMAGE_LIMITS, ImageLimits
from ...spawn import SpawnOptions
from .. import Agent, AgentOptions, Capabilities, SessionArchive, StateKey
from .._files import workspace_home, workspace_key
from .session import AcpSession
from .state import load_tree, save_tree

__all__ = ["AcpAgent", "AcpOptions", "ConfiguredAcpAgent", "ConfiguredAcpOptions"]

_WRAPPER = 'mkdir -p "$1" && chmod 700 "$1" && shift && exec "$@"'
"""Run as ``sh -c _WRAPPER nodeprov-acp HOME ARGV...``: the workspace's home made, private,
before the agent starts in it (no exec of its own for that)."""


class AcpOptions(AgentOptions):
    """Options every ACP agent takes. ACP has no structured output: ``output_schema`` is
    refused."""

    @model_validator(mode="after")
    def _no_schema(self) -> Self:
        if self.output_schema is not None:
            raise ValueError("ACP has no structured output: an ACP agent takes no output schema")
        return self


OptionsT = TypeVar("OptionsT", bound=AcpOptions)


class AcpAgent(Agent[OptionsT]):
    """An agent that speaks ACP on its stdio. A subclass says how it starts
    (:meth:`command`, :meth:`environment`), what it needs in its home first
    (:meth:`prepare_home`), and where its session state lies (``export_state`` and
    ``import_state``).

    Each workspace has its own home on the node (``$HOME/.nodeprov/NAME/KEY``, 0700), the
    agent's ``HOME``: its settings and sessions go there, so that two workspaces never see
    each other's sessions and nothing comes from the node's own home."""

    capabilities: ClassVar[Capabilities] = Capabilities(streaming=True, structured_output=False, acp=True)
    # Anthropic's, the stricter of the model APIs known: whether the agent takes images at
    # all, its initialize says (AcpSession).
    image_limits: ClassVar[ImageLimits | None] = ANTHROPIC_IMAGE_LIMITS

    def session(
        self,
        node: NodeHandle,
        *,
        workspace: str = "default",
        resume: str | None = None,
        archive: SessionArchive | None = None,
        keep: KeepOptions | None = None,
    ) -> AcpSession:
        return AcpSession(self, node, self.state_key(node, workspace), resume, archive, keep=keep)

    def state_key(self, node: NodeHandle, workspace: str = "default") -> str:
        """The agent's name, the workspace's (letters, digits, ``.``, ``_``, ``-``) and a hash
        of it: the name of the workspace's home on every node."""
        return workspace_key(self.name, workspace)

    def home_of(self, node: NodeHandle, project_key: str) -> str:
        """The home of the workspace whose key is ``project_key`` on ``node``."""
        return workspace_home(node, self.name, project_key)

    def workdir_on(self, node: NodeHandle) -> str:
        """The session's directory on ``node``, absolute: the options' ``cwd`` in the node's
        workdir (ACP takes absolute paths only)."""
        return node.node_path(self.options.cwd or ".")

    @abstractmethod
    def command(self, node: NodeHandle, home: str, *, resume: str | None) -> list[str]:
        """The agent's argument vector on ``node`` (it speaks ACP on its stdio), for a session
        that resumes ``resume`` (None: a new one)."""

    def environment(self, home: str) -> dict[str, str]:
        """The agent's environment: the options' ``env`` with ``HOME`` the workspace's."""
        return {**self.options.env, "HOME": home}

    def acp_command(self, node: NodeHandle, home: str, *, resume: str | None = None) -> SpawnOptions:
        """How the agent starts: :meth:`command` in the session's directory, with
        :meth:`environment`, its home made first."""
        argv = self.command(node, home, resume=resume)
        return SpawnOptions(
            "/bin/sh",
            ["-c", _WRAPPER, "nodeprov-acp", home, *argv],
            cwd=self.workdir_on(node),
            env=self.environment(home),
        )

    def authentication(self) -> str | None:
        """The ``authenticate`` method id the session uses after ``initialize`` (None: none)."""
        return None

    def history_settle(self) -> float:
        """Seconds of quiet after ``session/load``'s answer before the first prompt, for an
        agent that replays the history after it answers (where ACP has it before): what comes
        before the quiet is the replay, not the turn's. None by default."""
        return 0.0

    async def prepare_home(self, node: NodeHandle, home: str) -> None:
        """Write what the agent needs in ``home`` before it starts (its settings); nothing by
        default.

        Raises:
            NodeFileError, NodeGoneError: the node could not be written.
        """


class ConfiguredAcpOptions(AcpOptions):
    """Options of the ``acp`` agent: any agent that speaks ACP, named by its command."""

    command: list[str] = Field(
        min_length=1,
        description='The agent\'s argument vector on the node, e.g. ["opencode", "acp"] or '
        '["gemini", "--acp"]; it must speak ACP on its stdin and stdout.',
    )
    model_flag: str | None = Field(
        default=None,
        description="The option of the command that takes the model (e.g. --model); None: the agent "
        "takes no model option, and a run that names one is refused.",
    )
    auth_method: str | None = Field(
        default=None, description="The ACP authenticate method id to use after initialize, if it needs one."
    )
    history_settle: float = Field(
        default=0.0,
        ge=0,
        description="Seconds of quiet awaited after session/load's answer before the first prompt, for an "
        "agent that replays a loaded session's history after it answers (ACP has it before).",
    )
    state_paths: list[str] = Field(
        default_factory=list,
        description="Where, relative to the agent's home (its HOME on the node), it keeps its sessions: "
        "archived after each turn and written on a fresh node before a resume there (paths, or shell glob "
        "patterns without spaces). None given: a session resumes only on the node it ran on.",
    )

    @model_validator(mode="after")
    def _checked(self) -> Self:
        if self.model is not None and self.model_flag is None:
            raise ValueError("this agent's entry names no model_flag: it takes no model")
        for path in self.state_paths:
            if not path or path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"a state path is relative to the agent's home, inside it: {path!r}")
        return self


class ConfiguredAcpAgent(AcpAgent[ConfiguredAcpOptions]):
    """Any ACP agent, named by its options (``command``, ``model_flag``, ``state_paths``);
    its model API's endpoint and key go in ``env`` as the agent reads them."""

    name: ClassVar[str] = "acp"
    options_model: ClassVar[type[AgentOptions]] = ConfiguredAcpOptions
    cli_name: ClassVar[str] = "acp"

    def authentication(self) -> str | None:
        return self.options.auth_method

    def history_settle(self) -> float:
        return self.options.history_settle

    def command(self, node: NodeHandle, home: str, *, resume: str | None) -> list[str]:
        cli, *rest = self.options.command
        argv = [self.options.cli_path or node.tool_paths.get(cli, cli), *rest]
        if self.options.model is not None and self.options.model_flag is not None:
            argv += [self.options.model_flag, self.options.model]
        return argv

    async def import_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> bool:
        key: StateKey = {"project_key": project_key, "session_id": session_id}
        home = self.home_of(node, project_key)
        return bool(self.options.state_paths) and await load_tree(node, home, key, archive)

    async def export_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> None:
        key: StateKey = {"project_key": project_key, "session_id": session_id}
        if self.options.state_paths:
            await save_tree(node, self.home_of(node, project_key), self.options.state_paths, key, archive)
