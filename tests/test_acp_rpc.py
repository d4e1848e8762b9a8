"""ACP's JSON-RPC over an agent process's stdio (nodeprov.agents.acp.rpc), against a scripted
agent process on a local node: answers matched by id whatever their order, notifications in
the agent's order before the answer after them, the agent's own requests served, errors both
ways, an agent that exits or writes what is not JSON-RPC, a close that ends every task."""

from __future__ import annotations

import random
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeHandle, get_provider
from nodeprov.agents.acp.rpc import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    Answer,
    Connection,
    Notification,
    RpcError,
)
from nodeprov.errors import AgentExitError, AgentOutputError
from nodeprov.spawn import SpawnOptions

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


async def _unserved(method: str, params: Any) -> Any:
    raise AssertionError(f"the agent asked {method}")


@asynccontextmanager
async def _connected(node: NodeHandle, serve: Any = _unserved) -> AsyncIterator[Connection]:
    async with await node.spawn(SpawnOptions(sys.executable, ["-c", _AGENT])) as process:
        rpc = Connection(process, serve)
        try:
            yield rpc
        finally:
            await rpc.aclose()


@pytest.mark.parametrize("seed", range(5))
async def test_answers_reach_their_requests_whatever_their_order(node: NodeHandle, seed: int) -> None:
    order, answered = list(range(30)), list(range(30))
    random.Random(seed).shuffle(order)
    random.Random(seed + 1000).shuffle(answered)  # the agent answers in another order than asked
    async with _connected(node) as rpc:
        with anyio.fail_after(30):
            asked = {await rpc.send("hold", value): value for value in order}
            release = await rpc.send("release", answered)
            got: dict[int, Any] = {}
            while True:
                answer = await rpc.receive()
                assert isinstance(answer, Answer)
                if answer.id == release:
                    break
                got[asked[answer.id]] = answer.value()
    assert got == {value: value for value in order}
    assert list(got) == answered  # taken in the agent's order


async def test_notifications_come_in_order_before_the_answer_after_them(node: NodeHandle) -> None:
    async with _connected(node) as rpc:
        with anyio.fail_after(30):
            result, heard = await rpc.request("stream", 2000)
    assert result == "streamed"
    assert heard == [Notification("session/update", {"n": n}) for n in range(2000)]


async def test_the_agents_requests_are_served_and_a_refusal_goes_back_as_an_error(node: NodeHandle) -> None:
    async def serve(method: str, params: Any) -> Any:
        if method == "fs/read_text_file":
            return {"content": f"read {params['path']}"}
        if method == "broken":
            raise KeyError("a defect")
        raise RpcError(METHOD_NOT_FOUND, f"no {method} here")

    async with _connected(node, serve) as rpc:
        with anyio.fail_after(30):
            read, _ = await rpc.request("ask", {"method": "fs/read_text_file", "params": {"path": "/w/a.py"}})
            refused, _ = await rpc.request("ask", {"method": "terminal/create", "params": {}})
            broken, _ = await rpc.request("ask", {"method": "broken", "params": {}})
    assert read["result"] == {"content": "read /w/a.py"}
    assert refused["error"] == {"code": METHOD_NOT_FOUND, "message": "no terminal/create here", "data": None}
    assert broken["error"]["code"] == INTERNAL_ERROR  # answered all the same: the agent waits for it


async def test_an_error_answer_raises_with_its_code_message_and_data(node: NodeHandle) -> None:
    async with _connected(node) as rpc:
        with anyio.fail_after(30), pytest.raises(RpcError, match="no such session") as raised:
            await rpc.request("fail")
        assert (raised.value.code, raised.value.data) == (-32002, {"sessionId": "s"})
        assert (await rpc.request("stream", 0))[0] == "streamed"  # the channel goes on


async def test_an_agent_that_exits_ends_the_inbox_and_the_requests_after(node: NodeHandle) -> None:
    async with _connected(node) as rpc:
        with anyio.fail_after(30):
            await rpc.send("hold", 1)
            with pytest.raises(AgentExitError, match="closed its output"):
                await rpc.request("exit")
            with pytest.raises(AgentExitError, match="closed its output"):
                await rpc.receive()
            with pytest.raises(AgentExitError):
                await rpc.send("stream", 1)
    assert isinstance(rpc.ended, AgentExitError)


async def test_what_is_not_json_rpc_ends_the_channel_with_what_it_was(node: NodeHandle) -> None:
    async with _connected(node) as rpc:
        with anyio.fail_after(30):
            await rpc.notify("garbage")
            with pytest.raises(AgentOutputError, match="this is not json"):
                await rpc.receive()


async def test_a_close_ends_the_reader_and_the_requests_being_served(node: NodeHandle) -> None:
    started, cancelled = anyio.Event(), anyio.Event()

    async def serve(method: str, params: Any) -> Any:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async with _connected(node, serve) as rpc:
        with anyio.fail_after(30):
            await rpc.send("ask", {"method": "terminal/wait_for_exit", "params": {}})
            await started.wait()
            await rpc.aclose()
            await cancelled.wait()
            with pytest.raises(anyio.ClosedResourceError):
                await rpc.receive()
            await rpc.aclose()  # idempotent
