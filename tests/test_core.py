"""The core's own guarantees: validation, the registry, Rollback, and what NodeHandle and
NodeProvider add around a provider's hooks (a minimal in-test provider stands in)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.abc
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from nodeprov import (
    LABEL_EXPIRES_AT,
    LABEL_NODE_ID,
    ConfigError,
    DeadlineError,
    NodeConfig,
    NodeGoneError,
    NodeHandle,
    NodeInfo,
    NodeProvider,
    NodeSuspendedError,
    ProviderNotFoundError,
    ProviderSettings,
    Rollback,
    SpawnedProcess,
    SpawnOptions,
    get_provider,
    provider_names,
)
from nodeprov.agents.registry import agent_names, route_model
from nodeprov.node import NODE_TRANSITIONS, NodeState
from nodeprov.registry import provider_class

pytestmark = pytest.mark.anyio


# -- SpawnOptions and NodeConfig ------------------------------------------------------


def test_spawn_options_reject_a_shell_string_and_nul() -> None:
    with pytest.raises(TypeError, match="list of strings"):
        SpawnOptions("sh", "-c 'echo hi'")  # a str is a Sequence[str]: only a runtime check helps
    with pytest.raises(TypeError):
        SpawnOptions("echo", [1])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="NUL"):
        SpawnOptions("echo", ["a\x00b"])
    with pytest.raises(ConfigError, match="non-empty"):
        SpawnOptions("")
    with pytest.raises(ConfigError, match="variable names"):
        SpawnOptions("env", env={"A=B": "x"})
    options = SpawnOptions("echo", ["a", "b"], env={"X": "1"})
    assert options.argv == ["echo", "a", "b"]
    with pytest.raises(TypeError):
        options.env["Y"] = "2"  # type: ignore[index]


def test_node_config_validation_and_labels() -> None:
    with pytest.raises(ValueError, match="lowercase"):
        NodeConfig(node_id="Bad_Id")
    with pytest.raises(ValueError, match="reserved"):
        NodeConfig(labels={"nodeprov.owner": "me"})
    with pytest.raises(ValueError, match="extra"):
        NodeConfig(colour="blue")  # type: ignore[call-arg]
    now = datetime(2026, 1, 1, tzinfo=UTC)
    config = NodeConfig(ttl=timedelta(hours=2))
    labels = config.resource_labels(now)
    assert labels[LABEL_NODE_ID] == config.node_id
    assert labels[LABEL_EXPIRES_AT] == "2026-01-01T02:00:00+00:00"
    assert LABEL_EXPIRES_AT not in NodeConfig(ttl=None).resource_labels()
    assert NodeConfig().node_id != NodeConfig().node_id


# -- registry -------------------------------------------------------------------------


def test_registry_finds_local_and_reports_unknown_names() -> None:
    assert "local" in provider_names()
    assert provider_class("local").name == "local"
    with pytest.raises(ProviderNotFoundError, match=r"installed: .*local"):
        get_provider("no-such-provider")


def test_a_provider_is_looked_up_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = provider_class("local")

    def no_scanning(**_: object) -> None:
        raise AssertionError("the installed entry points were scanned again")

    agents = agent_names()
    route_model(None)  # the fallback: every agent's class, by name
    monkeypatch.setattr("nodeprov._plugins.entry_points", no_scanning)
    assert provider_class("local") is loaded
    assert get_provider("local").name == "local"
    assert agent_names() == agents
    assert route_model(None) == route_model("a-model-nobody-claims")


def test_unknown_or_invalid_settings_name_each_field() -> None:
    with pytest.raises(ConfigError) as caught:
        get_provider("local", colour="blue", eof_grace=-1)
    message = str(caught.value)
    assert "colour: Extra inputs are not permitted" in message
    assert "eof_grace" in message
    assert "fields: root, path" in message


# -- Rollback -------------------------------------------------------------------------


async def test_rollback_undoes_in_reverse_on_error_and_cancel_only() -> None:
    undone: list[str] = []

    def undo(name: str) -> Any:
        async def step() -> None:
            await anyio.sleep(0.01)  # runs shielded even when the block was cancelled
            undone.append(name)

        return step

    async with Rollback() as rollback:
        rollback.push(undo("a"))
    assert undone == []  # success keeps everything

    async def fail_half_way() -> None:
        async with Rollback() as rollback:
            rollback.push(undo("a"))
            rollback.push(undo("b"))
            raise RuntimeError

    with pytest.raises(RuntimeError):
        await fail_half_way()
    assert undone == ["b", "a"]

    undone.clear()
    with anyio.move_on_after(0.05):
        async with Rollback() as rollback:
            rollback.push(undo("c"))
            await anyio.sleep(10)
    assert undone == ["c"]


# -- NodeHandle and NodeProvider guarantees, with a minimal provider ------------------


class _Process(SpawnedProcess):
    """A process that runs until killed; its streams are in memory."""

    def __init__(self) -> None:
        super().__init__()
        send, receive = anyio.create_memory_object_stream[bytes](1)
        self.stdin = _Sink()
        self.stdout = self.stderr = _Empty(receive)
        self._send = send
        self._exit = anyio.Event()
        self._code: int | None = None
        self.terminated = False

    @property
    def returncode(self) -> int | None:
        return self._code

    async def wait(self) -> int:
        await self._exit.wait()
        assert self._code is not None
        return self._code

    async def terminate(self) -> None:
        self.terminated = True  # and ignores it, like a stubborn agent

    async def kill(self) -> None:
        self._code = -9
        self._exit.set()


class _Sink(anyio.abc.ByteSendStream):
    async def send(self, item: bytes) -> None:
        pass

    async def aclose(self) -> None:
        pass


class _Empty(anyio.abc.ByteReceiveStream):
    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self._stream = stream

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._stream.receive()

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Settings(ProviderSettings):
    destroy_seconds: float = 0.0
    spawn_seconds: float = 0.0
    suspend_seconds: float = 0.0


class _Node(NodeHandle):
    can_suspend = True

    def __init__(self, config: NodeConfig, settings: _Settings) -> None:
        super().__init__(
            node_id=config.node_id,
            provider="inline",
            labels=config.resource_labels(),
            workdir="/",
            base_env={},
        )
        self.settings = settings
        self.destroy_calls = 0
        self.spawned: list[_Process] = []

    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(self.settings.spawn_seconds)
        process = _Process()
        self.spawned.append(process)
        return process

    async def _destroy(self) -> None:
        self.destroy_calls += 1
        await anyio.sleep(self.settings.destroy_seconds)
        for process in self.spawned:  # the platform's removal takes every process
            await process.kill()

    async def _suspend(self) -> None:
        await anyio.sleep(self.settings.suspend_seconds)

    async def _wake(self) -> None:
        pass


class _Provider(NodeProvider[_Settings]):
    name: ClassVar[str] = "inline"
    settings_model: ClassVar[type[ProviderSettings]] = _Settings

    async def _provision(self, config: NodeConfig) -> NodeHandle:
        return _Node(config, self.settings)

    async def list_nodes(self) -> list[NodeInfo]:
        return []

    async def attach(self, node_id: str) -> NodeHandle:
        raise NodeGoneError(node_id)


async def test_destroy_is_idempotent_and_kills_live_processes() -> None:
    node = await _Provider.from_settings().provision()
    assert isinstance(node, _Node)
    process = await node.spawn(SpawnOptions("anything"))
    assert isinstance(process, _Process)
    await node.destroy()
    await node.destroy()
    assert node.destroy_calls == 1
    assert process.returncode == -9  # the platform's removal took it
    assert not process.terminated  # no stop policy: the removal made it moot
    with pytest.raises(NodeGoneError):
        await node.spawn(SpawnOptions("anything"))


async def test_destroy_is_bounded_and_can_be_retried() -> None:
    node = await _Provider.from_settings(destroy_seconds=5).provision()
    assert isinstance(node, _Node)
    started = anyio.current_time()
    with pytest.raises(DeadlineError, match=r"took over 0\.1s"):
        await node.destroy(destroy_timeout=0.1)
    assert anyio.current_time() - started < 4  # not 5 s: the deadline, 1 s for handles, load
    assert not node.destroyed
    node.settings = _Settings()
    await node.destroy()
    assert node.destroyed


async def test_suspend_is_bounded_even_when_cancelled_and_can_be_retried() -> None:
    """A platform that takes its time (EC2 waits up to 600 s for a stop) holds a shielded
    suspend no longer than ``suspend_timeout``, cancelled or not."""
    node = await _Provider.from_settings(suspend_seconds=3600).provision()
    assert isinstance(node, _Node)
    with (
        anyio.fail_after(30),
        anyio.move_on_after(0.01),  # a cancellation waits for the bound
        pytest.raises(DeadlineError, match=r"took over 0\.2s"),
    ):
        await node.suspend(suspend_timeout=0.2)
    assert not node.suspended
    node.settings = _Settings()
    await node.suspend()
    assert node.suspended


async def test_destroy_runs_to_the_end_when_cancelled() -> None:
    node = await _Provider.from_settings(destroy_seconds=0.2).provision()
    with anyio.move_on_after(0.01):
        await node.destroy()
    assert node.destroyed  # shielded: the cancellation waited for it


async def test_a_spawn_cancelled_midway_kills_its_process() -> None:
    node = await _Provider.from_settings(spawn_seconds=0.2).provision()
    assert isinstance(node, _Node)
    with anyio.move_on_after(0.05):
        await node.spawn(SpawnOptions("anything"))
    assert [p.returncode for p in node.spawned] == [-9]
    await node.destroy()


async def test_a_spawn_that_finishes_during_destroy_is_killed() -> None:
    node = await _Provider.from_settings(spawn_seconds=0.2).provision()
    assert isinstance(node, _Node)
    async with anyio.create_task_group() as tg:

        async def spawn() -> None:
            with pytest.raises(NodeGoneError, match="during spawn"):
                await node.spawn(SpawnOptions("anything"))

        tg.start_soon(spawn)
        await anyio.sleep(0.05)
        await node.destroy()
    assert [p.returncode for p in node.spawned] == [-9]


async def test_garbage_collection_goes_on_past_a_failed_destroy_and_reports_it() -> None:
    from datetime import datetime

    from nodeprov import ProviderError

    class Refusing(_Node):
        async def _destroy(self) -> None:
            raise ProviderError("the platform refused")

    class Reaper(_Provider):
        def __init__(self, settings: _Settings) -> None:
            super().__init__(settings)
            past = NodeConfig(ttl=timedelta(seconds=-1))
            self.nodes = {
                config.node_id: config
                for config in (past.model_copy(update={"node_id": f"n-{i}"}) for i in range(3))
            }
            self.destroyed: list[str] = []

        async def list_nodes(self) -> list[NodeInfo]:
            return [
                NodeInfo(i, "inline", c.resource_labels(datetime(2020, 1, 1, tzinfo=UTC)), "up")
                for i, c in self.nodes.items()
            ]

        async def attach(self, node_id: str) -> NodeHandle:
            config = self.nodes[node_id]
            return (Refusing if node_id == "n-1" else _Node)(config, self.settings)

    provider = Reaper(_Settings())
    report = await provider.collect_garbage()
    assert sorted(info.node_id for info in report.reaped) == ["n-0", "n-2"]
    assert [(info.node_id, why) for info, why in report.failed] == [("n-1", "the platform refused")]
    spared = await provider.collect_garbage(spare={"n-0", "n-1", "n-2"})  # spared their owners' judgement
    assert sorted(info.node_id for info in spared.reaped) == ["n-0", "n-2"]  # never their lifetime


def test_a_node_id_with_a_trailing_newline_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="lowercase letters"):
        NodeConfig(node_id="np-1\n")


async def test_the_fake_provider_trusts_no_planted_record(tmp_path: Path) -> None:
    """A record naming a directory outside the root (or not its own) is not a node: gc
    never removes what it names."""
    from nodeprov.testing.fake_provider import FakeProvider

    root, victim = tmp_path / "root", tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    provider = FakeProvider.from_settings(root=str(root))
    expired = NodeConfig(ttl=timedelta(seconds=-1)).resource_labels()
    for name, node_id in (("planted", "../victim"), ("other", "np-000000000001")):
        (root / name).mkdir(parents=True)
        (root / name / "node.json").write_text(json.dumps({"node_id": node_id, "labels": expired}))
    root.chmod(0o700)
    assert await provider.list_nodes() == []
    assert (await provider.collect_garbage()).reaped == []
    assert (victim / "precious").read_text() == "keep me"


async def test_the_fake_provider_refuses_a_root_others_can_write(tmp_path: Path) -> None:
    from nodeprov.testing.fake_provider import FakeProvider

    (tmp_path / "shared").mkdir(mode=0o777)
    (tmp_path / "shared").chmod(0o777)
    with pytest.raises(ConfigError, match="writable by group or others"):
        await FakeProvider.from_settings(root=str(tmp_path / "shared")).list_nodes()


def test_test_doubles_are_no_installed_providers() -> None:
    """The fake provider is registered in test processes only: a user's CLI never lists it,
    and a plain `nodeprov gc` never walks its root."""
    import subprocess
    import sys
    from importlib.metadata import entry_points

    assert "fake" not in {ep.name for ep in entry_points(group="nodeprov.providers")}
    assert "fake" in provider_names()  # this process is a test: nodeprov's pytest plugin registered it
    listed = subprocess.run(
        [sys.executable, "-m", "nodeprov", "providers", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert listed.stdout.strip()
    assert "fake" not in {json.loads(line)["name"] for line in listed.stdout.splitlines()}


async def test_a_handle_moves_through_its_lifecycle_and_a_closing_node_starts_nothing() -> None:
    """The lifecycle of :mod:`nodeprov.node.state`: active, suspended and back, destroying,
    destroyed; a suspended node refuses spawns until it wakes, a destroyed one for good."""
    node = await _Provider.from_settings().provision()
    assert node.state is NodeState.ACTIVE
    await node.suspend()
    assert (node.state, node.suspended) == (NodeState.SUSPENDED, True)
    with pytest.raises(NodeSuspendedError):
        await node.spawn(SpawnOptions("true"))
    await node.wake()
    await node.wake()  # staying where it is is no transition
    assert (node.state, node.suspended) == (NodeState.ACTIVE, False)
    await node.suspend()
    await node.destroy()
    # The destroy of a suspended node saw it suspended (a machine is not reached first).
    assert (node.state, node.suspended, node.destroyed) == (NodeState.DESTROYED, True, True)
    with pytest.raises(NodeGoneError):
        await node.spawn(SpawnOptions("true"))
    with pytest.raises(NodeGoneError):
        await node.wake()
    assert NODE_TRANSITIONS[NodeState.DESTROYED] == frozenset()
    assert {state for targets in NODE_TRANSITIONS.values() for state in targets} == set(NodeState)
