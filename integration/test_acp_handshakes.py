"""The ACP agents whose model cannot be faked here, GitHub Copilot CLI (``copilot --acp
--stdio``) and Qwen Code (``qwen --acp``), checked where their packages install
(``scripts/copilot.sh``, ``scripts/qwen.sh``, each a pinned version): they need a live key to
do any work, but their handshake needs none. Each runs on a local node as the ``acp`` agent
runs it (its argument vector, its private home on the node, its environment: nothing but the
node's PATH and what the options give, so no key and no user config), and:

- answers nodeprov's ``initialize`` (protocol version 1, the client capabilities
  :class:`~nodeprov.agents.acp.client.NodeClient` offers) with a well-formed answer: the
  protocol version an int, ``agentCapabilities`` an object, ``authMethods`` a list, whose
  method ids are those the pinned version names (recorded as the test's ``auth_methods``
  property);
- refuses a session through nodeprov's own driver (``get_agent("acp", ...).session``:
  ``initialize``, then ``session/new`` with the model flag) with its "Authentication
  required" error (ACP's -32000), at once, rather than leaving the turn waiting.

Nothing leaves this machine. Unswitched, both CLIs reach out within seconds of starting: the
Copilot CLI checks api.github.com for a newer version of itself (``COPILOT_AUTO_UPDATE=false``
turns that off), Qwen Code sends usage statistics to Alibaba Cloud's RUM
(``QWEN_USAGE_STATISTICS_ENABLED=false`` turns that off); both were found by tracing their
connections. Those switches are in the agents' environment, and so is a proxy
(``HTTPS_PROXY``, ``HTTP_PROXY``, either case) on 127.0.0.1 that forwards nothing and notes
each connection it gets: both CLIs send their HTTP(S) traffic through it. The handshake is
held open for :data:`_QUIET` seconds after its answer, longer than either CLI took to make
its first request unswitched, and the proxy must have seen nothing: the handshake, and the
refusal of a session, need no network.

A CLI that is missing skips its test (fails it under ``CI=true``: ``make engines`` installs
both)."""

from __future__ import annotations

import re
import shutil
import socket
import socketserver
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeConfig, NodeHandle, get_agent, get_provider
from nodeprov.agents.acp import ConfiguredAcpAgent
from nodeprov.agents.acp.client import NodeClient
from nodeprov.agents.acp.rpc import Connection, RpcError
from nodeprov.agents.acp.session import PROTOCOL_VERSION
from nodeprov.testing.pytest_plugin import require_engine

pytestmark = pytest.mark.anyio

_REPO = Path(__file__).resolve().parent.parent
_TIMEOUT = 120  # a start of the CLI and its answer, on a loaded machine
_QUIET = 6.0  # unswitched, each CLI made its first request within 3 s of starting
_AUTH_REQUIRED = -32000  # ACP's error code for "authenticate first"


@dataclass(frozen=True)
class LiveKeyAgent:
    """An ACP agent that needs a live key, as its install script pins it."""

    name: str  # its script's name (scripts/NAME.sh) and its tool's on the node
    launcher: str  # where the CLI lies under .tools/NAME-VERSION/
    command: list[str]  # the `acp` agent's command
    quiet_env: dict[str, str]  # what keeps it off the network
    model: str  # a model its --model takes
    agent_info: str  # the agentInfo.name it answers with
    auth_methods: list[str]  # the authenticate method ids the pinned version names
    needs: list[str] = field(default_factory=list)  # other executables it needs on PATH

    def __str__(self) -> str:
        return self.name

    @property
    def pinned(self) -> str:
        """The version its script installs."""
        script = (_REPO / "scripts" / f"{self.name}.sh").read_text()
        found = re.search(r"^version=(\S+)$", script, re.M)
        assert found is not None, f"scripts/{self.name}.sh pins no version"
        return found[1]

    def installed(self) -> str | None:
        """The CLI its script installed, if it did."""
        found = sorted((_REPO / ".tools" / f"{self.name}-{self.pinned}").glob(self.launcher))
        return str(found[0]) if found else None


AGENTS = [
    LiveKeyAgent(
        name="copilot",
        launcher="node_modules/@github/copilot-linux*/copilot",
        command=["copilot", "--acp", "--stdio"],
        quiet_env={"COPILOT_AUTO_UPDATE": "false"},
        model="gpt-5",
        agent_info="Copilot",
        auth_methods=["copilot-login"],
    ),
    LiveKeyAgent(
        name="qwen",
        launcher="node_modules/@qwen-code/qwen-code/cli-entry.js",
        command=["qwen", "--acp"],
        quiet_env={"QWEN_USAGE_STATISTICS_ENABLED": "false"},
        model="qwen3-coder-plus",
        agent_info="qwen-code",
        auth_methods=["openai"],
        needs=["node"],
    ),
]


class _Proxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy on 127.0.0.1 that forwards nothing: each connection's first line (a
    ``CONNECT host:443 HTTP/1.1``, or a plain request's) is noted, and the connection closed."""

    daemon_threads = True
    seen: list[str]

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Noted(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, _Proxy)
        connection: socket.socket = self.request
        connection.settimeout(2)
        try:
            first = connection.recv(4096)
        except OSError:
            first = b""
        self.server.seen.append(first.split(b"\r\n", 1)[0].decode(errors="replace") or "(nothing sent)")


@pytest.fixture
def proxy() -> Iterator[_Proxy]:
    server = _Proxy(("127.0.0.1", 0), _Noted)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(params=AGENTS, ids=str)
def live(request: pytest.FixtureRequest) -> tuple[LiveKeyAgent, str]:
    """The agent and its CLI, which its script installed (else skipped; failed in CI)."""
    agent: LiveKeyAgent = request.param
    cli = agent.installed()
    missing = [tool for tool in agent.needs if shutil.which(tool) is None]
    require_engine(
        f"the {agent.name} CLI {agent.pinned}" + (f" ({', '.join(missing)} missing)" if missing else ""),
        cli is not None and not missing,
        f"run scripts/{agent.name}.sh",
    )
    assert cli is not None
    return agent, cli


@pytest.fixture
async def node(live: tuple[LiveKeyAgent, str], tmp_path: Path) -> AsyncIterator[NodeHandle]:
    """A local node under ``tmp_path`` with the agent's CLI as the tool its command names."""
    agent, cli = live
    provider = get_provider("local", root=tmp_path / "nodes")
    async with provider, await provider.provision(NodeConfig(tools={agent.name: cli})) as made:
        yield made


def _options(agent: LiveKeyAgent, proxy: _Proxy, **fields: Any) -> dict[str, Any]:
    """The ``acp`` agent's options for ``agent``: its command, no key, its network switches
    off and every proxy variable on ``proxy``."""
    proxies = {name: proxy.url for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")}
    return {
        "command": agent.command,
        "env": {**agent.quiet_env, **proxies},
        "permission": "full",
        "no_output_timeout": _TIMEOUT,
        **fields,
    }


async def test_initialize_is_answered_without_a_key_or_the_network(
    live: tuple[LiveKeyAgent, str],
    node: NodeHandle,
    proxy: _Proxy,
    record_property: Callable[[str, object], None],
) -> None:
    """The agent started as the ``acp`` agent starts it (its command, home and environment),
    asked to ``initialize`` as a session asks it, through nodeprov's JSON-RPC connection with
    the capabilities nodeprov's client offers."""
    agent, _ = live
    acp = get_agent("acp", _options(agent, proxy))
    assert isinstance(acp, ConfiguredAcpAgent)
    home = acp.home_of(node, acp.state_key(node))
    client = NodeClient(node, "full", acp.workdir_on(node), kept=False)
    assert client.capabilities() == {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
    process = await node.spawn(acp.acp_command(node, home))
    connection = Connection(process, client, name=f"the {agent.name} agent")
    try:
        with anyio.fail_after(_TIMEOUT):
            answer, _ = await connection.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": client.capabilities(),
                    "clientInfo": {"name": "nodeprov", "title": "nodeprov", "version": version("nodeprov")},
                },
            )
        await anyio.sleep(_QUIET)  # what it would send on its start, it has sent by now
        assert process.returncode is None, "the agent exited after its handshake"
    finally:
        await connection.aclose()
        await client.aclose()
        await process.aclose()

    assert isinstance(answer, dict), answer
    assert isinstance(answer["protocolVersion"], int)
    assert answer["protocolVersion"] == PROTOCOL_VERSION
    capabilities = answer["agentCapabilities"]
    assert isinstance(capabilities, dict), answer
    assert isinstance(capabilities.get("loadSession", False), bool)  # what a resume asks
    assert isinstance(capabilities.get("promptCapabilities", {}), dict)  # what images ask
    assert answer.get("agentInfo", {}).get("name") == agent.agent_info
    assert answer["agentInfo"].get("version") == agent.pinned
    methods = answer["authMethods"]
    assert isinstance(methods, list), answer
    assert all(isinstance(method, dict) and isinstance(method.get("id"), str) for method in methods), methods
    ids = [method["id"] for method in methods]
    record_property("auth_methods", ids)
    record_property("agent_capabilities", capabilities)
    assert ids == agent.auth_methods
    assert proxy.seen == []  # no request left the agent: no model request, no network


async def test_a_session_without_a_key_is_refused_by_the_agent_at_once(
    live: tuple[LiveKeyAgent, str], node: NodeHandle, proxy: _Proxy
) -> None:
    """Through nodeprov's driver, the command with its model flag: ``initialize`` is
    answered, and ``session/new`` is refused with the agent's "Authentication required";
    the turn fails with it, and nothing reaches the network."""
    agent, _ = live
    options = _options(agent, proxy, model_flag="--model", model=agent.model)
    with anyio.fail_after(_TIMEOUT):
        async with get_agent("acp", options).session(node) as session:
            with pytest.raises(RpcError) as refused:
                _ = [message async for message in session.turn("say hello")]
    assert refused.value.code == _AUTH_REQUIRED, refused.value
    assert "Authentication required" in refused.value.message
    assert session.session_id is None
    assert proxy.seen == []
