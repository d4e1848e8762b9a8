"""ACP's JSON-RPC over an agent process's stdio (nodeprov.agents.acp.rpc), against a scripted
agent process on a local node: answers matched by id whatever their order, notifications in
the agent's order, the agent's own requests served, errors both ways, an agent that exits or
writes what is not JSON-RPC."""

from __future__ import annotations

import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeHandle, get_provider
from nodeprov.agents.acp.rpc import METHOD_NOT_FOUND, Connection, RpcError, connect
from nodeprov.errors import AgentExitError, AgentOutputError
from nodeprov.spawn import SpawnedProcess, SpawnOptions

pytestmark = pytest.mark.anyio

# A scripted agent: "hold" keeps a request, "release" answers those kept in the order given;
# "stream" notifies N updates, then answers; "ask" sends the client a request and answers
# with the client's answer; "fail" answers with an error; "exit" and "garbage" misbehave.
_AGENT = r"""
import json, sys
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
held, asked, number = {}, {}, 1000
for line in sys.stdin:
    message = json.loads(line)
    method, params = message.get("method"), message.get("params")
    if method is None:
        send({"jsonrpc": "2.0", "id": asked.pop(message["id"]), "result": message})
    elif method == "hold":
        held[params] = message["id"]
    elif method == "release":
        for value in params:
            send({"jsonrpc": "2.0", "id": held.pop(value), "result": value})
        send({"jsonrpc": "2.0", "id": message["id"], "result": None})
    elif method == "stream":
        for n in range(params):
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"n": n}})
        send({"jsonrpc": "2.0", "id": message["id"], "result": "streamed"})
    elif method == "ask":
        number += 1
        asked[number] = message["id"]
        send({"jsonrpc": "2.0", "id": number, "method": params["method"], "params": params["params"]})
    elif method == "fail":
        send({"jsonrpc": "2.0", "id": message["id"],
              "error": {"code": -32002, "message": "no such session", "data": {"sessionId": "s"}}})
    elif method == "exit":
        sys.exit(3)
    elif method == "garbage":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
"""


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as handle:
        yield handle


async def _agent(node: NodeHandle) -> SpawnedProcess:
    return await node.spawn(SpawnOptions(sys.executable, ["-c", _AGENT]))


def _deaf(method: str, params: Any) -> None:
    pass


async def _unserved(method: str, params: Any) -> Any:
    raise AssertionError(f"the agent asked {method}")


@pytest.mark.parametrize("seed", range(5))
async def test_answers_reach_their_requests_whatever_their_order(node: NodeHandle, seed: int) -> None:
    order, answered = list(range(30)), list(range(30))
    random.Random(seed).shuffle(order)
    random.Random(seed + 1000).shuffle(answered)  # the agent answers in another order than asked
    got: dict[int, Any] = {}
    async with await _agent(node) as process, connect(process, serve=_unserved, listen=_deaf) as rpc:

        async def hold(value: int) -> None:
            got[value] = await rpc.request("hold", value)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for value in order:
                    group.start_soon(hold, value)
                await anyio.wait_all_tasks_blocked()
                assert await rpc.request("release", answered) is None
    assert got == {value: value for value in order}


async def test_notifications_reach_the_listener_in_order_before_the_answer(node: NodeHandle) -> None:
    heard: list[int] = []
    async with await _agent(node) as process:
        listen = lambda method, params: heard.append(params["n"]) if method == "session/update" else None  # noqa: E731
        async with connect(process, serve=_unserved, listen=listen) as rpc:
            with anyio.fail_after(30):
                assert await rpc.request("stream", 2000) == "streamed"
                assert heard == list(range(2000))


async def test_the_agents_requests_are_served_and_a_refusal_goes_back_as_an_error(node: NodeHandle) -> None:
    async def serve(method: str, params: Any) -> Any:
        if method == "fs/read_text_file":
            return {"content": f"read {params['path']}"}
        raise RpcError(METHOD_NOT_FOUND, f"no {method} here")

    async with await _agent(node) as process, connect(process, serve=serve, listen=_deaf) as rpc:
        with anyio.fail_after(30):
            read = await rpc.request("ask", {"method": "fs/read_text_file", "params": {"path": "/w/a.py"}})
            refused = await rpc.request("ask", {"method": "terminal/create", "params": {}})
    assert read["result"] == {"content": "read /w/a.py"}
    assert refused["error"] == {"code": METHOD_NOT_FOUND, "message": "no terminal/create here", "data": None}


async def test_an_error_answer_raises_with_its_code_message_and_data(node: NodeHandle) -> None:
    async with await _agent(node) as process, connect(process, serve=_unserved, listen=_deaf) as rpc:
        with anyio.fail_after(30), pytest.raises(RpcError, match="no such session") as raised:
            await rpc.request("fail")
        assert (raised.value.code, raised.value.data) == (-32002, {"sessionId": "s"})
        assert await rpc.request("stream", 0) == "streamed"  # the channel goes on


async def test_an_agent_that_exits_fails_the_requests_it_left_and_those_after(node: NodeHandle) -> None:
    left: list[BaseException] = []

    async def held(rpc: Connection) -> None:
        try:
            await rpc.request("hold", 1)
        except AgentExitError as error:
            left.append(error)

    async with await _agent(node) as process, connect(process, serve=_unserved, listen=_deaf) as rpc:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(held, rpc)
                await anyio.wait_all_tasks_blocked()
                with pytest.raises(AgentExitError, match="closed its output"):
                    await rpc.request("exit")
            assert [str(error) for error in left] == ["the agent closed its output"]
            with pytest.raises(AgentExitError):
                await rpc.request("stream", 1)


async def test_what_is_not_json_rpc_ends_the_channel_with_what_it_was(node: NodeHandle) -> None:
    async def garbage(process: SpawnedProcess) -> None:
        async with connect(process, serve=_unserved, listen=_deaf) as rpc:
            await rpc.notify("garbage")
            await anyio.sleep_forever()  # until the reader fails the block

    async with await _agent(node) as process:
        with anyio.fail_after(30), pytest.raises(AgentOutputError, match="this is not json"):
            await garbage(process)
