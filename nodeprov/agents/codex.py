"""The ``codex`` agent: the OpenAI Codex CLI on a node, ``codex exec --json``.

Each turn is one ``codex exec`` process, started through the node's spawn function with its
stdin closed at once; ``codex exec resume THREAD_ID`` continues a thread. Its JSONL events
become the one message model:

=====================================  ==============================================
Codex event                            message
=====================================  ==============================================
``thread.started``                     :class:`Notice` with ``session_id`` (thread id)
``turn.started``                       :class:`Notice`
item ``agent_message`` (completed)     :class:`AgentText`
item ``reasoning`` (completed)         :class:`Thinking`
item ``command_execution``             :class:`ToolUse` ``command_execution``
                                       (``{"command": ...}``) at start, then
                                       :class:`ToolResult` (its output; an error when
                                       the exit code is not 0)
item ``file_change``                   :class:`ToolUse` ``file_change`` (``changes``) and
                                       :class:`ToolResult`
item ``mcp_tool_call``                 :class:`ToolUse` ``mcp:SERVER/TOOL`` and
                                       :class:`ToolResult`
item ``web_search``                    :class:`ToolUse` ``web_search`` (``query``) and
                                       :class:`ToolResult`
item ``todo_list`` (any update)        :class:`Notice` ``todo_list`` (the list as text)
item ``error``                         :class:`Notice` ``warning``: Codex's error items
                                       are not fatal (say, ``Model metadata ... not
                                       found`` for a model of a custom endpoint, on
                                       every turn of runs that succeed)
``turn.completed``                     :class:`Result` (``usage``; ``text``: the last
                                       agent message)
``turn.failed``                        :class:`Result` with ``is_error``
``error`` ``Reconnecting...``          :class:`Notice` with ``retry`` (not progress)
``error`` (other)                      :class:`ErrorMessage`
=====================================  ==============================================

Each workspace has its own ``CODEX_HOME`` on the node (``$HOME/.nodeprov/codex/KEY``): the
process gets exactly the options' ``env`` and that ``CODEX_HOME`` over the node's base
environment, and sees no other workspace's sessions or credentials. The session state is
the thread's rollout file under ``CODEX_HOME/sessions``, archived after every turn and
before the node goes.

A prompt's images are written to the node under the workspace's home, named by their hash,
and attached with ``--image``; the prompt's text goes on stdin. Codex puts the images before
the text in its user message, whatever their order in the prompt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import secrets
import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from ..errors import AgentExitError, AgentOutputError, ConfigError, NodeprovError
from ..node import NodeHandle
from ..node.keeper import KeepOptions, KeptProcess, reattach, stopped_by_keeper
from ..offline import demo_responses
from ..prompts import OPENAI_IMAGE_LIMITS, ImageLimits, Prompt, prompt_text
from ..spawn import SpawnedProcess, SpawnOptions, StopPolicy
from . import (
    Agent,
    AgentOptions,
    AgentText,
    Capabilities,
    ErrorMessage,
    Message,
    ModelInfo,
    Notice,
    Result,
    SessionArchive,
    StateKey,
    Thinking,
    ToolResult,
    ToolUse,
)
from ._files import archive_file, read_lines, workspace_key, write_images, write_jsonl
from ._guard import start_agent
from ._installed import installed_cli
from .per_turn import PerTurnSession
from .structured import check_structured

__all__ = ["CodexAgent", "CodexOptions", "CodexSession", "ModelProvider"]

logger = logging.getLogger("nodeprov.agents.codex")

_SANDBOX: dict[str, list[str]] = {
    "read-only": ["--sandbox", "read-only"],
    "edit": ["--sandbox", "workspace-write"],
    "full": ["--dangerously-bypass-approvals-and-sandbox"],
}
# Lookups of other hosts (plugins, analytics) are off: a node may have no way out but the model's.
_QUIET = ["--skip-git-repo-check", "--disable", "plugins", "-c", "analytics.enabled=false"]
_STDERR_TAIL_LINES = 20
_EXIT_TIMEOUT = 10.0  # for the process to exit once its turn is over
_WRAPPER = """\
home=$1 err=$2; shift 2
mkdir -p "$home/nodeprov" && chmod 700 "$home" || exit 1
exec 3<&0
(trap '' TERM; exec "$@" <&3 3<&- 2>"$err") &
exec 3<&-
child=$!
trap 'kill -INT "$child" 2>/dev/null' TERM INT HUP
while :; do
  wait "$child"; status=$?
  kill -0 "$child" 2>/dev/null || break
done
[ "$status" != 0 ] || rm -f "$err"
exit "$status"
"""
"""Run as ``sh -c _WRAPPER nodeprov-codex HOME STDERR_FILE CODEX ARGS...``: makes the
workspace's home private and runs Codex with its stderr in a file (kept only when Codex
fails). Codex starts each
command in a session of its own, out of reach of a signal to the turn's process group,
and on SIGTERM dies leaving them running; on SIGINT it stops them and exits. So Codex
ignores SIGTERM, and the wrapper (the group's leader) turns a stop signal into that
SIGINT. Codex's stdin is the wrapper's (saved on fd 3: a background job's would be
/dev/null), and carries the prompt: never an argument, which ``ps`` and a cluster's audit
log would show, and which the kernel caps (``E2BIG`` past 128 KiB)."""


class ModelProvider(BaseModel):
    """An OpenAI-compatible endpoint for Codex (its ``model_providers`` table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="custom", description="Display name of the provider.")
    base_url: str = Field(description="Base URL of the API, e.g. http://127.0.0.1:8000/v1.")
    wire_api: Literal["responses", "chat"] = Field(default="responses", description="Which API it speaks.")
    env_key: str | None = Field(
        default=None, description="Name of the variable (in the options' env) that holds its API key."
    )
    model_catalog_url: str | None = Field(
        default=None,
        description="Where Codex reads the provider's model catalog (Codex's own format); without it, "
        "a model Codex does not know gets a 'model metadata not found' error item.",
    )


class CodexOptions(AgentOptions):
    """Options of the ``codex`` agent (the OpenAI Codex CLI)."""

    model_provider: ModelProvider | None = Field(
        default=None, description="An OpenAI-compatible endpoint to use instead of OpenAI's own."
    )
    no_output_timeout: float | None = Field(
        default=30.0,
        gt=0,
        description="As for every agent, but 30 s by default: the Codex CLI retries for ever when its "
        "endpoint is down.",
    )


class CodexAgent(Agent[CodexOptions]):
    """The OpenAI Codex CLI (``codex exec --json``); see :mod:`nodeprov.agents.codex`."""

    name: ClassVar[str] = "codex"
    options_model: ClassVar[type[AgentOptions]] = CodexOptions
    cli_name: ClassVar[str] = "codex"
    capabilities: ClassVar[Capabilities] = Capabilities(streaming=True, structured_output=True)
    models: ClassVar[tuple[ModelInfo, ...]] = (
        ModelInfo("gpt-5-codex", "GPT-5 Codex", 400_000, vision=True),
        ModelInfo("gpt-5", "GPT-5", 400_000, vision=True),
        ModelInfo("o4-mini", "o4-mini", 200_000, vision=True),
        ModelInfo("o3-mini", "o3-mini", 200_000, vision=False),
    )
    model_patterns: ClassVar[tuple[str, ...]] = (r"gpt-.*", r"o[1-4](-.*)?", r"codex-.*")
    image_limits: ClassVar[ImageLimits | None] = OPENAI_IMAGE_LIMITS

    @classmethod
    @asynccontextmanager
    async def offline(cls, prompt: str) -> AsyncIterator[dict[str, Any]]:
        async with demo_responses(prompt) as responses:
            provider = responses.codex_config()  # with its catalog: Codex knows the model
            yield {"env": responses.agent_env(), "model_provider": provider, "model": responses.model}

    @classmethod
    def local_cli(cls) -> str | None:
        """``NODEPROV_CODEX_CLI``, else ``codex`` on PATH, else the one ``scripts/codex.sh``
        installed (:func:`~nodeprov.agents._installed.installed_cli`), if an executable file
        is there; an npm install's JavaScript launcher is followed to the native binary it
        runs (which needs no node.js on a node)."""
        found = os.environ.get("NODEPROV_CODEX_CLI") or shutil.which("codex") or installed_cli("codex")
        if found is None:
            return None
        path = Path(found).resolve()
        if path.suffix == ".js":  # @openai/codex/bin/codex.js: the binary is in a platform package
            natives = sorted(path.parent.parent.parent.glob("codex-linux-*/vendor/*/bin/codex"))
            natives += sorted(
                path.parent.parent.glob("node_modules/@openai/codex-linux-*/vendor/*/bin/codex")
            )
            return str(natives[0]) if natives else None
        return str(path) if os.access(path, os.X_OK) and path.is_file() else None

    def session(
        self,
        node: NodeHandle,
        *,
        workspace: str = "default",
        resume: str | None = None,
        archive: SessionArchive | None = None,
        keep: KeepOptions | None = None,
    ) -> CodexSession:
        return CodexSession(self, node, self.state_key(node, workspace), resume, archive, keep=keep)

    def state_key(self, node: NodeHandle, workspace: str = "default") -> str:
        """``codex-`` and the workspace's name (letters, digits, ``.``, ``_``, ``-``) and a
        hash of it: the name of the workspace's ``CODEX_HOME`` on every node."""
        return workspace_key("codex", workspace)

    def command(
        self, node: NodeHandle, *, resume: str | None, schema_file: str | None, images: Sequence[str] = ()
    ) -> list[str]:
        """The argument vector of one turn: ``codex exec`` (or ``codex exec resume ID``),
        which reads its prompt from stdin (``-``) and attaches the image files ``images``."""
        options = self.options
        argv = [self.cli_on(node), "exec", "--json", *_QUIET, *_SANDBOX[options.permission]]
        argv += ["--cd", node.node_path(options.cwd or node.workdir)]
        if options.model:
            argv += ["--model", options.model]
        if (provider := options.model_provider) is not None:
            table = {"name": provider.name, "base_url": provider.base_url, "wire_api": provider.wire_api}
            if provider.env_key:
                table["env_key"] = provider.env_key
            if provider.model_catalog_url:
                table["model_catalog_url"] = provider.model_catalog_url
                argv += ["-c", "features.api_key_model_discovery=true"]
            fields = ", ".join(f"{key} = {json.dumps(value)}" for key, value in table.items())
            argv += ["-c", "model_provider=nodeprov", "-c", f"model_providers.nodeprov={{ {fields} }}"]
        if schema_file is not None:
            argv += ["--output-schema", schema_file]
        if resume is not None:
            argv += ["resume", resume]
        # One path an option (--image takes a list: a bare path after it would join the list).
        argv += [f"--image={path}" for path in images]
        return [*argv, "--", "-"]  # the prompt comes on stdin

    async def import_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> bool:
        key: StateKey = {"project_key": project_key, "session_id": session_id}
        subpaths = [s for s in await archive.subpaths(key) if s.startswith("sessions/")]
        for subpath in subpaths:
            entries = await archive.load({**key, "subpath": subpath}) or []
            await write_jsonl(node, f"{_home(node, project_key)}/{subpath}.jsonl", entries)
        return bool(subpaths)

    async def export_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> None:
        home = _home(node, project_key)
        for path in await _rollouts(node, home, session_id):
            subpath = posixpath.relpath(path, home).removesuffix(".jsonl")
            await archive_file(
                node,
                path,
                {"project_key": project_key, "session_id": session_id, "subpath": subpath},
                archive,
            )


class CodexSession(PerTurnSession):
    """Codex turns on a node: one ``codex exec`` process per turn."""

    cli: ClassVar[str] = "codex"
    _agent: CodexAgent

    async def turn(self, prompt: Prompt) -> AsyncIterator[Message]:
        node, options = self._node, self._agent.options
        blocks = self._agent.prepare_prompt(prompt)
        text = prompt_text(blocks)
        if "\x00" in text:
            raise ConfigError("a prompt cannot hold a NUL character")
        home = _home(node, self._project_key)
        images = await write_images(node, f"{home}/nodeprov/images", blocks)
        schema_file = None
        if options.output_schema is not None:
            schema = json.dumps(options.output_schema, sort_keys=True).encode()
            schema_file = f"{home}/nodeprov/schema-{hashlib.sha256(schema).hexdigest()[:16]}.json"
            await node.write_file(schema_file, schema)
        self._stderr_file = f"{home}/nodeprov/stderr-{secrets.token_hex(8)}.log"
        argv = self._agent.command(node, resume=self.session_id, schema_file=schema_file, images=images)
        # The workspace's home is made private; stderr goes to a file there, which no full
        # pipe can stall and which is read back only when the turn fails.
        prepared = ["-c", _WRAPPER, "nodeprov-codex", home, self._stderr_file, *argv]
        # Stdin is ended at once; the CLI stops itself if the control plane goes, or is kept.
        process, end_input = await start_agent(
            node.spawn,
            SpawnOptions("/bin/sh", prepared, env={**options.env, "CODEX_HOME": home}),
            StopPolicy(),
            keep_with=self._keep,
            node=node,
        )
        self.keeper = process.keeper if isinstance(process, KeptProcess) else None
        self._interrupted = False
        async with process:
            await process.stdin.send(f"{text}\n".encode())
            await end_input()
            async for message in self._relay(process, 0):
                yield message

    async def follow(self, keeper: str, skip: int) -> AsyncIterator[Message]:
        self._stderr_file = ""  # the turn's own is not known here
        self.keeper = keeper
        self._interrupted = False
        async with await reattach(self._node, keeper, settings=self._keep) as process:
            async for message in self._relay(process, skip):
                yield message

    async def _relay(self, process: SpawnedProcess, skip: int) -> AsyncIterator[Message]:
        """The turn's messages off ``process``, less the first ``skip``, to its result."""
        options = self._agent.options
        self._process = process
        converter = _Converter()
        try:
            await process.stderr.aclose()
            result: Result | None = None
            async for batch in self._events(process, converter, options.no_output_timeout or float("inf")):
                for message in batch:
                    if isinstance(message, Result):
                        result = message
                        break
                    if skip:
                        skip -= 1
                        continue
                    yield message
                if result is not None:
                    break
            if result is None:
                result = await self._ending(process, converter.failure)
            elif options.output_schema is not None:
                result = check_structured(result, options.output_schema)
            await self._archive_state()
            yield result
        finally:
            self._process = None

    async def _ending(self, process: SpawnedProcess, said: str) -> Result:
        """A turn that ended without ``turn.completed`` or ``turn.failed`` (``said``: the
        last reconnect notice)."""
        with anyio.move_on_after(_EXIT_TIMEOUT):
            await process.wait()
        if self._interrupted:
            return Result(True, "interrupted", session_id=self.session_id)
        lines = await read_lines(self._node, self._stderr_file) if self._stderr_file else []
        raise AgentExitError(
            stopped_by_keeper(process)
            or f"codex ended without finishing its turn (exit status {process.returncode})"
            + (f": {said}" if said else ""),
            exit_code=process.returncode,
            stderr_tail="\n".join(line[:2000] for line in lines[-_STDERR_TAIL_LINES:]),
        )

    async def interrupt(self) -> None:
        """Codex takes no interrupt over ``exec``: the turn's process group is sent SIGTERM,
        which the wrapper turns into the SIGINT on which Codex stops its commands and exits;
        the turn ends with an ``interrupted`` error result."""
        process = self._process
        if process is not None:
            self._interrupted = True
            await process.terminate()


def _home(node: NodeHandle, project_key: str) -> str:
    return f"{node.base_env.get('HOME', '/root')}/.nodeprov/codex/{project_key}"


async def _rollouts(node: NodeHandle, home: str, thread_id: str) -> list[str]:
    """The rollout files of ``thread_id`` under ``home``'s ``sessions``."""
    find = SpawnOptions("find", [f"{home}/sessions", "-type", "f", "-name", f"rollout-*-{thread_id}.jsonl"])
    try:
        with anyio.fail_after(30):
            async with await node.spawn(find) as finder:
                await finder.stdin.aclose()
                said = b"".join([chunk async for chunk in finder.stdout])
                await finder.wait()
    except (NodeprovError, TimeoutError) as error:
        logger.warning("rollout of thread %s not found on node %s: %s", thread_id, node.node_id, error)
        return []
    return sorted(line for line in said.decode(errors="replace").splitlines() if line.startswith("/"))


class _Converter:
    """Codex JSONL events to messages (the table in the module's docstring)."""

    def __init__(self) -> None:
        self.started: set[str] = set()  # items whose ToolUse was said
        self.running_tools: set[str] = set()
        self.last_text = ""
        self.thread_id: str | None = None
        self.failure = ""  # the last reconnect notice: why the model is not answering

    @property
    def session_id(self) -> str | None:
        return self.thread_id

    @property
    def waiting_on_model(self) -> bool:
        return not self.running_tools

    def convert(self, event: dict[str, Any] | None) -> list[Message]:  # noqa: PLR0911 - one per kind
        if event is None:
            return []
        kind = event.get("type")
        if kind == "thread.started":
            self.thread_id = str(event.get("thread_id") or "") or None
            return [Notice("thread.started", session_id=self.thread_id, raw=event)]
        if kind in ("item.started", "item.updated", "item.completed"):
            item = event.get("item")
            if not isinstance(item, dict):
                raise AgentOutputError(f"codex {kind} event without an item: {str(event)[:200]}")
            return self._item(kind, item, event)
        if kind == "turn.completed":
            usage = event.get("usage")
            return [Result(False, self.last_text, session_id=self.thread_id, usage=usage, raw=event)]
        if kind == "turn.failed":
            error = event.get("error") or {}
            said = error.get("message") if isinstance(error, dict) else str(error)
            return [Result(True, str(said or "the turn failed"), session_id=self.thread_id, raw=event)]
        if kind == "error":
            said = str(event.get("message") or "")
            if said.startswith("Reconnecting"):
                self.failure = said
                return [Notice("error", said, retry=True, raw=event)]
            return [ErrorMessage(said, raw=event)]
        return [Notice(str(kind), raw=event)]

    def _item(self, kind: str, item: dict[str, Any], event: dict[str, Any]) -> list[Message]:  # noqa: PLR0911
        item_id, item_type = str(item.get("id") or ""), item.get("type")
        done = kind == "item.completed"
        if item_type == "agent_message":
            if not done:
                return []
            self.last_text = str(item.get("text") or "")
            return [AgentText(self.last_text, raw=event)]
        if item_type == "reasoning":
            return [Thinking(str(item.get("text") or ""), raw=event)] if done else []
        if item_type == "todo_list":
            lines = [
                f"[{'x' if i.get('completed') else ' '}] {i.get('text')}" for i in item.get("items") or []
            ]
            return [Notice("todo_list", "\n".join(lines), raw=event)]
        if item_type == "error":  # not fatal: the turn goes on (a failure is turn.failed)
            return [Notice("warning", str(item.get("message") or ""), raw=event)] if done else []
        # Any other item is work under way until it completes (a command, a file change, an
        # MCP tool call, a web search, a kind a later Codex adds): silence then is not the model's.
        if done:
            self.running_tools.discard(item_id)
        else:
            self.running_tools.add(item_id)
        tool = _tool(item)
        if tool is None:
            return [Notice(f"item.{item_type}", raw=event)] if done else []
        messages: list[Message] = []
        if item_id not in self.started:
            self.started.add(item_id)
            messages.append(ToolUse(item_id, tool[0], tool[1], raw=event))
        if done:
            output, failed = _tool_output(item)
            messages.append(ToolResult(item_id, output, failed, raw=event))
        return messages


def _tool(item: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """A tool item's name and input, else None."""
    item_type = item.get("type")
    if item_type == "command_execution":
        return "command_execution", {"command": item.get("command")}
    if item_type == "file_change":
        return "file_change", {"changes": item.get("changes") or []}
    if item_type == "mcp_tool_call":
        arguments = item.get("arguments")
        return f"mcp:{item.get('server')}/{item.get('tool')}", arguments if isinstance(
            arguments, dict
        ) else {}
    if item_type == "web_search":
        return "web_search", {"query": item.get("query")}
    return None


def _tool_output(item: dict[str, Any]) -> tuple[str, bool]:
    failed = item.get("status") == "failed"
    item_type = item.get("type")
    if item_type == "command_execution":
        code = item.get("exit_code")
        return str(item.get("aggregated_output") or ""), failed or (code is not None and code != 0)
    if item_type == "file_change":
        changes = item.get("changes") or []
        return "\n".join(f"{c.get('kind')} {c.get('path')}" for c in changes if isinstance(c, dict)), failed
    if item_type == "mcp_tool_call":
        error = item.get("error")
        if error:
            return str(error.get("message") if isinstance(error, dict) else error), True
        return json.dumps(item.get("result")), failed
    return "", failed
