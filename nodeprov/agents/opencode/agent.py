"""The ``opencode`` agent's options, the agent, and its session (see :mod:`nodeprov.agents.opencode`)."""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar, Self

import anyio
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...errors import AgentExitError, ConfigError, NodeprovError
from ...node import NodeHandle
from ...node.keeper import KeepOptions, stopped_by_keeper
from ...offline import demo_chat
from ...prompts import (
    ANTHROPIC_IMAGE_LIMITS,
    OPENAI_IMAGE_LIMITS,
    ImageLimits,
    Prompt,
    prompt_text,
)
from ...spawn import SpawnedProcess, SpawnOptions, StopPolicy
from .. import Agent, AgentOptions, Capabilities, Message, ModelInfo, Result, SessionArchive
from .._files import read_lines, write_images
from .._guard import start_agent
from .._installed import installed_cli
from ..per_turn import PerTurnSession
from .events import Converter
from .state import home_of, load_state, new_session_id, save_state, state_key, workspace_env

__all__ = ["OpenCodeAgent", "OpenCodeOptions", "OpenCodeProvider", "OpenCodeSession", "ProviderModel"]

logger = logging.getLogger("nodeprov.agents.opencode")

_PROVIDER_ID = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_ASKED = {  # what OpenCode asks by default, and `opencode run` rejects, ending the turn: refused
    "external_directory": "deny",
    "doom_loop": "deny",
    "read": {"*": "allow", "*.env": "deny", "*.env.*": "deny", "*.env.example": "allow"},
}
_NOBODY_ANSWERS = {"question": "deny", "plan_enter": "deny", "plan_exit": "deny"}
_PERMISSION: dict[str, dict[str, Any]] = {
    "read-only": {"*": "allow", "edit": "deny", "bash": "deny", **_ASKED, **_NOBODY_ANSWERS},
    "edit": {"*": "allow", "bash": "deny", **_ASKED, **_NOBODY_ANSWERS},
    "full": {"*": "allow", **_NOBODY_ANSWERS},
}
"""OpenCode's ``permission`` config for each of nodeprov's permissions (its rules: the last
that matches wins). A denied tool is not offered to the model; a call to it, or to a denied
path, is an error the model sees, and the turn goes on."""
_EXIT_TIMEOUT = 10.0  # for the process to exit once its output is over
_TITLE = "nodeprov"  # a title given: OpenCode asks its model for none
_WRAPPER = """\
home=$1 err=$2; shift 2
mkdir -p "$home/nodeprov" "$home/config/opencode/node_modules" "$home/temp" && chmod 700 "$home" || exit 1
TMPDIR=$home/temp; export TMPDIR
lock=$home/config/opencode/package-lock.json
[ -f "$lock" ] || echo '{"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}' >"$lock" || exit 1
"$@" 2>"$err"
status=$?
[ "$status" != 0 ] || rm -f "$err"
exit "$status"
"""
"""Run as ``sh -c _WRAPPER nodeprov-opencode HOME STDERR_FILE OPENCODE ARGS...``: makes the
workspace's home private and runs OpenCode with its temporary files there (``TMPDIR``, set
here: the guard around this needs the node's own) and its stderr in a file (kept only when
it fails). OpenCode installs its plugin package from the npm registry into every config
directory that has no ``node_modules`` or whose lock file lacks the package: the home's
config directory gets both, so it never reaches for the registry."""


class ProviderModel(BaseModel):
    """A model of an :class:`OpenCodeProvider`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, description="Display name; default: the model's id.")
    vision: bool = Field(default=False, description="Whether it sees images (OpenCode drops them otherwise).")
    context_window: int = Field(default=128_000, gt=0, description="Its context window, in tokens.")


class OpenCodeProvider(BaseModel):
    """An OpenAI-compatible endpoint (Chat Completions) for OpenCode: a ``provider`` entry of
    its config, through the ``@ai-sdk/openai-compatible`` package bundled in OpenCode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(default="custom", pattern=f"^{_PROVIDER_ID}$", description="Its id: models are ID/MODEL.")
    name: str = Field(default="Custom", description="Display name of the provider.")
    base_url: str = Field(description="Base URL of the API, e.g. http://127.0.0.1:8000/v1.")
    env_key: str | None = Field(
        default=None, description="Name of the variable (in the options' env) that holds its API key."
    )
    models: dict[str, ProviderModel] = Field(min_length=1, description="Its models, by id.")


class OpenCodeOptions(AgentOptions):
    """Options of the ``opencode`` agent (``opencode run``)."""

    provider: OpenCodeProvider | None = Field(
        default=None, description="An OpenAI-compatible endpoint, beside OpenCode's own providers."
    )
    no_output_timeout: float | None = Field(
        default=30.0,
        gt=0,
        description="As for every agent, but 30 s by default: OpenCode retries for ever, silently, when "
        "its endpoint is down.",
    )

    @model_validator(mode="after")
    def _checked(self) -> Self:
        if self.output_schema is not None:
            raise ValueError("OpenCode has no structured output: `opencode run` takes no output schema")
        if self.model is not None and not re.fullmatch(f"{_PROVIDER_ID}/.+", self.model):
            raise ValueError(f"OpenCode names a model PROVIDER/MODEL, not {self.model!r}")
        provider = self.provider
        if provider is not None and self.model is not None:
            owner, _, model = self.model.partition("/")
            if owner == provider.id and model not in provider.models:
                raise ValueError(f"model {model!r} is not one of provider {provider.id}'s models")
        return self


class OpenCodeAgent(Agent[OpenCodeOptions]):
    """OpenCode (``opencode run --format json``); see :mod:`nodeprov.agents.opencode`."""

    name: ClassVar[str] = "opencode"
    options_model: ClassVar[type[AgentOptions]] = OpenCodeOptions
    cli_name: ClassVar[str] = "opencode"
    capabilities: ClassVar[Capabilities] = Capabilities(streaming=True, structured_output=False)
    # A few of OpenCode 1.18.33's built-in catalog (`opencode models --verbose`).
    models: ClassVar[tuple[ModelInfo, ...]] = (
        ModelInfo("opencode/big-pickle", "Big Pickle", 200_000),
        ModelInfo("opencode/glm-5", "GLM-5", 204_800),
        ModelInfo("opencode/kimi-k2.5", "Kimi K2.5", 262_144, vision=True),
        ModelInfo("opencode/gpt-5.1-codex", "GPT-5.1 Codex", 400_000, vision=True),
        ModelInfo("opencode/claude-sonnet-4-5", "Claude Sonnet 4.5", 1_000_000, vision=True),
        ModelInfo("anthropic/claude-sonnet-4-5", "Claude Sonnet 4.5", 1_000_000, vision=True),
        ModelInfo("openai/gpt-5", "GPT-5", 400_000, vision=True),
    )
    # Anthropic's, the stricter: for a model whose API is not known (limits_for_images).
    image_limits: ClassVar[ImageLimits | None] = ANTHROPIC_IMAGE_LIMITS
    # A provider/model pair, as OpenCode spells models: no other agent's names have a slash.
    model_patterns: ClassVar[tuple[str, ...]] = (f"{_PROVIDER_ID}/.+",)

    def __init__(self, options: OpenCodeOptions) -> None:
        super().__init__(options)
        # The (node, session) pairs archived since their last turn: an export is an OpenCode
        # start (most of a second), and a run's node going asks again for what its last turn
        # just archived.
        self._exported: set[tuple[str, str]] = set()

    @classmethod
    @asynccontextmanager
    async def offline(cls, prompt: str) -> AsyncIterator[dict[str, Any]]:
        async with demo_chat(prompt) as chat:
            yield {
                "env": chat.agent_env(),
                "provider": chat.opencode_provider(),
                "model": chat.opencode_model,
            }

    @classmethod
    def local_cli(cls) -> str | None:
        """``NODEPROV_OPENCODE_CLI``, else ``opencode`` on PATH, else the one
        ``scripts/opencode.sh`` installed (:func:`~nodeprov.agents._installed.installed_cli`);
        the npm package's launcher
        (``opencode-ai/bin/opencode.exe``, a copy of the native binary or, when its
        postinstall did not run, a script saying so) is followed to its platform package's
        binary, which needs no node.js on a node."""
        found = (
            os.environ.get("NODEPROV_OPENCODE_CLI") or shutil.which("opencode") or installed_cli("opencode")
        )
        if found is None:
            return None
        path = Path(found).resolve()
        if path.parent.parent.name == "opencode-ai":
            natives = sorted(path.parent.parent.parent.glob("opencode-linux-*/bin/opencode"))
            return str(natives[0]) if natives else None  # sorted: x64 before x64-baseline
        return str(path)

    def model_info(self) -> ModelInfo | None:
        """As for every agent, and a model of the options' :class:`OpenCodeProvider`."""
        provider, model = self.options.provider, self.options.model
        if provider is not None and model is not None and model.startswith(f"{provider.id}/"):
            found = provider.models[model.removeprefix(f"{provider.id}/")]
            return ModelInfo(model, found.name or model, found.context_window, vision=found.vision)
        return super().model_info()

    def limits_for_images(self) -> ImageLimits | None:
        """OpenAI's limits for an OpenAI-compatible endpoint and OpenAI's models; Anthropic's
        (the stricter) for Claude models and any other."""
        owner, _, model = (self.options.model or "").partition("/")
        custom = self.options.provider is not None and owner == self.options.provider.id
        openai = custom or owner == "openai" or model.startswith(("gpt-", "o1", "o3", "o4"))
        return OPENAI_IMAGE_LIMITS if openai else self.image_limits

    def session(
        self,
        node: NodeHandle,
        *,
        workspace: str = "default",
        resume: str | None = None,
        archive: SessionArchive | None = None,
        keep: KeepOptions | None = None,
    ) -> OpenCodeSession:
        return OpenCodeSession(self, node, self.state_key(node, workspace), resume, archive, keep=keep)

    def state_key(self, node: NodeHandle, workspace: str = "default") -> str:
        """``opencode-`` and the workspace's name (letters, digits, ``.``, ``_``, ``-``) and a
        hash of it: the name of the workspace's home on every node."""
        return state_key(workspace)

    def config(self) -> dict[str, Any]:
        """OpenCode's config (``OPENCODE_CONFIG_CONTENT``): the permission, the provider, no
        sharing, no update, no snapshots (undo is not nodeprov's: a snapshot copies the work
        tree into a git store of OpenCode's at every step)."""
        config: dict[str, Any] = {
            "autoupdate": False,
            "share": "disabled",
            "snapshot": False,
            "permission": _PERMISSION[self.options.permission],
        }
        if (provider := self.options.provider) is not None:
            options = {"baseURL": provider.base_url}
            if provider.env_key:
                options["apiKey"] = f"{{env:{provider.env_key}}}"  # the key itself stays in env
            models = {
                name: {
                    "name": model.name or name,
                    "attachment": model.vision,
                    "modalities": {
                        "input": ["text", "image"] if model.vision else ["text"],
                        "output": ["text"],
                    },
                    "limit": {"context": model.context_window, "output": min(32_000, model.context_window)},
                }
                for name, model in provider.models.items()
            }
            config["provider"] = {
                provider.id: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": provider.name,
                    "options": options,
                    "models": models,
                }
            }
        return config

    def command(self, node: NodeHandle, *, resume: str | None, files: list[str]) -> list[str]:
        """The argument vector of one turn: ``opencode run --format json`` (``--session ID``
        to continue), which reads its prompt from stdin; images attached as files."""
        argv = [self.cli_on(node), "run", "--format", "json", "--thinking"]
        if self.options.model:
            argv += ["--model", self.options.model]
        argv += ["--session", resume] if resume is not None else ["--title", _TITLE]
        return argv + [f"--file={path}" for path in files]

    def environment(self, home: str) -> dict[str, str]:
        """The environment of an OpenCode process of the workspace whose home is ``home``:
        the options' ``env``, under the workspace's own directories and config."""
        return {
            **self.options.env,
            **workspace_env(home),
            "OPENCODE_CONFIG_CONTENT": json.dumps(self.config()),
        }

    def wrapped(self, home: str, stderr_file: str, argv: list[str]) -> SpawnOptions:
        """``argv`` (an OpenCode command line) run under the wrapper in the options' ``cwd``."""
        args = ["-c", _WRAPPER, "nodeprov-opencode", home, stderr_file, *argv]
        return SpawnOptions("/bin/sh", args, cwd=self.options.cwd, env=self.environment(home))

    def new_session_id(self) -> str:
        return new_session_id()

    async def import_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> bool:
        return await load_state(self, node, session_id, project_key, archive)

    async def export_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> None:
        done = (node.node_id, session_id)
        if done not in self._exported and await save_state(self, node, session_id, project_key, archive):
            self._exported.add(done)

    def state_changes(self, node: NodeHandle, session_id: str | None) -> None:
        """A turn of ``session_id`` starts on ``node``: its archive no longer holds all of it."""
        self._exported.discard((node.node_id, session_id or ""))


class OpenCodeSession(PerTurnSession):
    """OpenCode turns on a node: one ``opencode run`` process per turn."""

    cli: ClassVar[str] = "opencode"
    _agent: OpenCodeAgent

    async def turn(self, prompt: Prompt) -> AsyncIterator[Message]:
        blocks = self._agent.prepare_prompt(prompt)
        text = prompt_text(blocks)
        if not text.strip():
            raise ConfigError("OpenCode takes no prompt without text")
        if "\x00" in text:
            raise ConfigError("a prompt cannot hold a NUL character")
        node, options = self._node, self._agent.options
        home = home_of(node, self._project_key)
        files = await write_images(node, f"{home}/nodeprov/images", blocks)
        self._stderr_file = f"{home}/nodeprov/stderr-{secrets.token_hex(8)}.log"
        argv = self._agent.command(node, resume=self.session_id, files=files)
        # The end of stdin means nothing to OpenCode (it has had it since the prompt): an
        # abort signals at once, and a guard whose channel closed waits no longer for it.
        policy = StopPolicy(eof_grace=0.0)
        self._interrupted = False
        self._agent.state_changes(node, self.session_id)
        converter = Converter(self.session_id)
        # Stdin ends after the prompt; OpenCode stops itself if the control plane goes (or is
        # kept); what its commands leave (each runs in a session of its own) is swept.
        process, end_input = await start_agent(
            node.spawn,
            self._agent.wrapped(home, self._stderr_file, argv),
            policy,
            keep_with=self._keep,
            node=node,
        )
        self._process = process
        try:
            # The prompt on stdin, never an argument (`ps` shows those, the kernel caps them).
            await process.stdin.send(f"{text}\n".encode())
            await end_input()
            await process.stderr.aclose()
            async for batch in self._events(process, converter, options.no_output_timeout or float("inf")):
                for message in batch:
                    yield message
            result = await self._ending(process, converter)
            await self._archive_state()
            yield result
        finally:
            self._process = None
            with anyio.CancelScope(shield=True):
                await self._stop(process)

    async def _ending(self, process: SpawnedProcess, converter: Converter) -> Result:
        """The turn's result, once OpenCode's output is over (it says none of its own)."""
        with anyio.move_on_after(_EXIT_TIMEOUT):
            await process.wait()
        if self._interrupted:
            return Result(True, "interrupted", session_id=self.session_id)
        result = converter.result(process.returncode)
        if result is not None:
            return result
        lines = await read_lines(self._node, self._stderr_file)
        raise AgentExitError(
            stopped_by_keeper(process)
            or f"opencode ended without finishing its turn (exit status {process.returncode})",
            exit_code=process.returncode,
            stderr_tail="\n".join(line[:2000] for line in lines[-20:]),
        )

    async def interrupt(self) -> None:
        """OpenCode takes no interrupt: it dies on SIGINT or SIGTERM at once, leaving the
        commands it started (each in a session of its own) to the guard, which stops them.
        So the turn's process group gets SIGTERM, and the turn ends with an ``interrupted``
        error result; the session resumes as usual (what OpenCode had saved of the turn)."""
        process = self._process
        if process is not None:
            self._interrupted = True
            await process.terminate()
            # The end of the guard's channel too: it sweeps at once what the turn left,
            # which a node that waits for every process of the turn (a local one) waits for.
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, NodeprovError):
                await process.stdin.aclose()

    async def _stop(self, process: SpawnedProcess) -> None:
        """SIGTERM to OpenCode before the end of the guard's channel, so that the guard finds
        it gone and sweeps what it left at once (rather than after its grace, OpenCode not
        being gone yet); never raises."""
        with suppress(NodeprovError):
            if process.returncode is None:
                await process.terminate()
            await process.aclose()
