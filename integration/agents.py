"""Helpers for tests that drive the real Claude Code CLI on a node."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, Message, ResultMessage, TextBlock, query

from nodeprov import NodeHandle
from nodeprov.agents.claude import NodeTransport, bundled_cli_path
from nodeprov.runs import Run
from nodeprov.testing import ScriptedChat, ScriptedGemini, ScriptedModel, ScriptedResponses
from nodeprov.testing.conformance import host_processes_matching, wait_until
from nodeprov.testing.pytest_plugin import require_engine

from .sshd import UNPRIVILEGED, Sshd

TURN_TIMEOUT = 180
_REPO = Path(__file__).resolve().parent.parent


def local(tmp_path: Path) -> dict[str, Any]:
    """``Orchestrator.start`` arguments for a local node under ``tmp_path``."""
    return {"provider": "local", "provider_settings": {"root": str(tmp_path / "nodes")}}


def on_docker(image: str) -> dict[str, Any]:
    """``Orchestrator.start`` arguments for a Docker node of ``image`` on the host's network
    (where the scripted models listen)."""
    settings = {"image": image, "network_mode": "host", "pull": "never"}
    return {"provider": "docker", "provider_settings": settings}


def on_ssh(sshd: Sshd, user: str = UNPRIVILEGED) -> dict[str, Any]:
    """``Orchestrator.start`` arguments for a node on the test sshd, logged in as ``user``."""
    return {"provider": "ssh", "provider_settings": sshd.settings(user, root=".nodeprov/runs")}


async def collect(run: Run) -> list[Any]:
    """Every event of ``run``'s drive, bounded in time."""
    with anyio.fail_after(TURN_TIMEOUT):
        return [event async for event in run.events()]


def require_claude_cli() -> None:
    require_engine(
        "the Claude Code CLI",
        bundled_cli_path() is not None,
        "install the claude-agent-sdk wheel for this platform (it bundles the CLI)",
    )


def require_codex_cli() -> None:
    """The Codex CLI: ``NODEPROV_CODEX_CLI``, else the one ``scripts/codex.sh`` installed
    (made known to :meth:`CodexAgent.local_cli` through that variable)."""
    if not os.environ.get("NODEPROV_CODEX_CLI"):
        installed = sorted(_REPO.glob(".tools/codex-*/node_modules/@openai/codex-linux-*/vendor/*/bin/codex"))
        if installed:
            os.environ["NODEPROV_CODEX_CLI"] = str(installed[-1])
    from nodeprov.agents.codex import CodexAgent

    require_engine("the Codex CLI", CodexAgent.local_cli() is not None, "run scripts/codex.sh")


def require_opencode_cli() -> None:
    """The OpenCode CLI: ``NODEPROV_OPENCODE_CLI``, else the one ``scripts/opencode.sh``
    installed (its AVX2 build, else its baseline one), made known to
    :meth:`OpenCodeAgent.local_cli` through that variable."""
    if not os.environ.get("NODEPROV_OPENCODE_CLI"):
        found = _REPO.glob(".tools/opencode-*/node_modules/opencode-linux-*/bin/opencode")
        installed = sorted(found, key=lambda path: (path.parents[3].name, "baseline" not in path.parts[-3]))
        if installed:
            os.environ["NODEPROV_OPENCODE_CLI"] = str(installed[-1])
    from nodeprov.agents.opencode import OpenCodeAgent

    require_engine("the OpenCode CLI", OpenCodeAgent.local_cli() is not None, "run scripts/opencode.sh")


def require_gemini_cli() -> str:
    """The Gemini CLI's launcher: ``NODEPROV_GEMINI_CLI``, else the one ``scripts/gemini.sh``
    installed (made known to :meth:`GeminiAgent.local_cli` through that variable)."""
    if not os.environ.get("NODEPROV_GEMINI_CLI"):
        installed = sorted(_REPO.glob(".tools/gemini-*/node_modules/@google/gemini-cli/bundle/gemini.js"))
        if installed:
            os.environ["NODEPROV_GEMINI_CLI"] = str(installed[-1])
    from nodeprov.agents.gemini import GeminiAgent

    cli = GeminiAgent.local_cli()
    require_engine(
        "the Gemini CLI", cli is not None and shutil.which("node") is not None, "run scripts/gemini.sh"
    )
    assert cli is not None
    return cli


def gemini_mounts() -> list[dict[str, Any]]:
    """Docker mounts that give a container this machine's Gemini CLI where it lies here (its
    launcher beside the rest of its package) and node.js on its PATH."""
    cli, node = Path(require_gemini_cli()), shutil.which("node")
    assert node is not None
    package = cli.parents[1]  # .../@google/gemini-cli: bundle/ and its node_modules
    return [
        {
            "source": str(package.parent.parent.parent),
            "target": str(package.parent.parent.parent),
            "read_only": True,
        },
        {"source": str(Path(node).resolve()), "target": "/usr/local/bin/node", "read_only": True},
    ]


def gemini_run_options(gemini: ScriptedGemini, **fields: Any) -> dict[str, Any]:
    """Options for a gemini agent that talks to ``gemini`` and may run commands without
    asking, with this machine's CLI where it lies here (on a local node, an SSH node of this
    machine, or a container with :func:`gemini_mounts`). The no-output limit is a loaded
    machine's: it counts the CLI's own start."""
    return {
        "env": gemini.agent_env(),
        "model": gemini.model,
        "permission": "full",
        "cli_path": require_gemini_cli(),
        "ship_cli": False,
        "no_output_timeout": 120,
        **fields,
    }


def opencode_acp_options(
    chat: ScriptedChat, provider: dict[str, Any] | None = None, **fields: Any
) -> dict[str, Any]:
    """Options of the ``acp`` agent (any ACP agent, by its command) for OpenCode in its ACP mode
    (``opencode acp``), talking to ``chat`` (or ``provider``, an OpenCode provider) as the
    opencode agent does, allowed to run commands."""
    from nodeprov.agents.opencode import OpenCodeAgent
    from nodeprov.agents.opencode.state import QUIET_ENV

    agent = OpenCodeAgent.from_options(
        opencode_run_options(chat, **({"provider": provider} if provider else {}))
    )
    config = {**agent.config(), "model": chat.opencode_model}
    return {
        "command": ["opencode", "acp"],
        "env": {**chat.agent_env(), "OPENCODE_CONFIG_CONTENT": json.dumps(config), **QUIET_ENV},
        "permission": "full",
        "state_paths": [".local/share/opencode"],
        "no_output_timeout": 120,
        **fields,
    }


def run_options(model: ScriptedModel, **fields: Any) -> dict[str, Any]:
    """Orchestrator options for a claude agent that talks to ``model``, may run tools without
    asking, and whose CLI is this machine's (the SDK's bundled one), shipped to the node."""
    return {"env": model.agent_env(), "permission": "full", "ship_cli": True, **fields}


def codex_run_options(responses: ScriptedResponses, **fields: Any) -> dict[str, Any]:
    """Orchestrator options for a codex agent that talks to ``responses`` (its model known
    from the server's catalog), may run commands without asking, and whose CLI is this
    machine's, shipped to the node."""
    return {
        "env": responses.agent_env(),
        "model_provider": responses.codex_config(),
        "model": responses.model,
        "permission": "full",
        "ship_cli": True,
        **fields,
    }


def opencode_run_options(chat: ScriptedChat, **fields: Any) -> dict[str, Any]:
    """Orchestrator options for an opencode agent that talks to ``chat`` (an OpenAI-compatible
    provider of its config), may run commands without asking, and whose CLI is this
    machine's, shipped to the node. The no-output limit is a loaded machine's: it counts
    OpenCode's own start-up, which took over 30 s once at a load average of 44 (a check of
    the limit sets its own)."""
    return {
        "env": chat.agent_env(),
        "provider": chat.opencode_provider(),
        "model": chat.opencode_model,
        "permission": "full",
        "ship_cli": True,
        "no_output_timeout": 120,
        **fields,
    }


def agent_options(model: ScriptedModel, **fields: Any) -> ClaudeAgentOptions:
    """Options for an agent that talks to ``model`` and may run tools without asking."""
    return ClaudeAgentOptions(env=model.agent_env(), permission_mode="bypassPermissions", **fields)


async def run_query(node: NodeHandle, prompt: str, options: ClaudeAgentOptions) -> list[Message]:
    """Every message of one ``query`` on ``node``, bounded in time."""
    transport = NodeTransport.for_node(node, options)
    with anyio.fail_after(TURN_TIMEOUT):
        return [m async for m in query(prompt=prompt, options=options, transport=transport)]


def result_of(messages: list[Message]) -> ResultMessage:
    results = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(results) == 1, messages
    return results[0]


def texts(messages: list[Message]) -> list[str]:
    return [
        block.text
        for message in messages
        if isinstance(message, AssistantMessage)
        for block in message.content
        if isinstance(block, TextBlock)
    ]


async def until_tool_runs(marker: str) -> None:
    """Wait until the agent's tool (a ``sleep`` with ``marker`` as its duration) is running."""

    async def running() -> bool:
        return bool(host_processes_matching(marker))

    assert await wait_until(running, 90), "the agent's tool never started"


async def until_model_asked(model: ScriptedModel, count: int = 1) -> None:
    """Wait until ``model`` has had ``count`` requests of the agent's own: the turn that
    answers each is taken, so a pause after this cannot leave it to the next drive."""

    async def asked() -> bool:
        return len(model.agent_requests) >= count

    assert await wait_until(asked, TURN_TIMEOUT), "the agent never asked its model"


def argument_vectors() -> list[str]:
    """The argument vector of every process on this machine, each joined with spaces (what
    ``ps`` and audit logs show): a secret must be in none."""
    return [_cmdline(int(entry)) for entry in os.listdir("/proc") if entry.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # the process ended meanwhile
        return ""
