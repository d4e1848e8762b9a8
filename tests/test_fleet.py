"""The fleet (:mod:`nodeprov.fleet`): settings from an environment, providers made once per
settings, nodes found and listed across providers (one not set up is a note, one that fails
a failure), readiness, and closing. Over a fixed set of providers: the real ``local``, the
fake, and doubles that fail in the ways real platforms do."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest

from nodeprov.errors import ConfigError, NodeGoneError, ProviderError, ProviderNotFoundError
from nodeprov.fleet import (
    Fleet,
    Readiness,
    make_provider,
    provider_settings_from_env,
    readiness,
    settings_from_env,
)
from nodeprov.node import NodeHandle, NodeInfo, ProviderSettings, Requirement
from nodeprov.registry import provider_names, register_provider
from nodeprov.testing.fake_provider import FakeProvider, FakeSettings

pytestmark = pytest.mark.anyio


class DownProvider(FakeProvider):
    """A platform that cannot be reached."""

    name: ClassVar[str] = "down"

    async def list_nodes(self) -> list[NodeInfo]:
        raise ProviderError("engine unreachable\nat 127.0.0.1:1")

    async def attach(self, node_id: str) -> NodeHandle:
        raise ProviderError("engine unreachable")


class LoggedOutProvider(FakeProvider):
    """A platform whose credentials are gone: not set up here."""

    name: ClassVar[str] = "logged-out"

    async def list_nodes(self) -> list[NodeInfo]:
        raise ConfigError("logged out: log in again")


class NeedySettings(FakeSettings):
    host: str


NEEDY_SKIPPED = (
    "needy: skipped, not set up here (invalid settings for provider 'needy': host: Field required)"
)


class NeedyProvider(FakeProvider):
    """A provider that needs a setting (as ssh needs its host)."""

    name: ClassVar[str] = "needy"
    settings_model: ClassVar[type[ProviderSettings]] = NeedySettings


class ClosingProvider(FakeProvider):
    """Counts the closes that got through (closing takes a checkpoint, as a connection's does)."""

    name: ClassVar[str] = "closing"

    def __init__(self, settings: FakeSettings) -> None:
        super().__init__(settings)
        self.closed = 0

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.closed += 1


class HangingProvider(FakeProvider):
    name: ClassVar[str] = "hanging"

    async def probe(self) -> None:
        await anyio.sleep_forever()


class ToollessProvider(FakeProvider):
    name: ClassVar[str] = "toolless"

    @classmethod
    def requirements(cls) -> list[Requirement]:
        return [Requirement("tool", False, "not on PATH"), Requirement("key", True, "~/.key")]


class ImageSettings(FakeSettings):
    image: str | None = None


class ImageProvider(FakeProvider):
    name: ClassVar[str] = "imaged"
    settings_model: ClassVar[type[ProviderSettings]] = ImageSettings


DOUBLES: list[type[FakeProvider]] = [
    FakeProvider,
    DownProvider,
    LoggedOutProvider,
    NeedyProvider,
    ClosingProvider,
    HangingProvider,
    ToollessProvider,
    ImageProvider,
]


@pytest.fixture(autouse=True)
def only_local_and_the_doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed ``local`` and this module's doubles are every provider there is (the
    others installed here are not these tests' business); registrations end with the test."""

    def only_local(group: str) -> list[EntryPoint]:
        return [ep for ep in entry_points(group=group) if ep.name == "local"]

    monkeypatch.setattr("nodeprov._plugins.entry_points", only_local)
    monkeypatch.setattr("nodeprov._plugins._scanned", {})
    monkeypatch.setattr("nodeprov._plugins._registered", {})
    for cls in DOUBLES:
        register_provider(cls.name, cls)


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, str]:
    """An environment that roots the local and fake providers under ``tmp_path``."""
    return {"NODEPROV_LOCAL_ROOT": str(tmp_path / "local"), "NODEPROV_FAKE_ROOT": str(tmp_path / "fake")}


# Settings from an environment


def test_settings_are_read_from_the_given_environment_as_json_when_it_parses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODEPROV_LOCAL_TERM_GRACE", "9")  # this process's: not the one given
    environ = {
        "NODEPROV_LOCAL_ROOT": "/srv/nodes",  # no JSON: the text
        "NODEPROV_LOCAL_EOF_GRACE": "2",
        "NODEPROV_LOCAL_INHERIT_ENV": '["HOME", "LANG"]',
        "NODEPROV_LOCAL_COLOUR": "blue",  # no such field: not read
        "NODEPROV_FAKE_PROVISION_DELAY": "1",  # another provider's
    }
    assert settings_from_env("local", environ=environ) == {
        "root": "/srv/nodes",
        "eof_grace": 2,
        "inherit_env": ["HOME", "LANG"],
    }
    given = settings_from_env("local", {"eof_grace": 7, "path": "/bin"}, environ)
    assert given == {"root": "/srv/nodes", "eof_grace": 7, "inherit_env": ["HOME", "LANG"], "path": "/bin"}
    assert settings_from_env("local") == {"term_grace": 9}  # no environment given: this process's


def test_a_provider_name_with_a_dash_reads_its_variables_with_an_underscore() -> None:
    assert settings_from_env("logged-out", environ={"NODEPROV_LOGGED_OUT_DESTROY_DELAY": "0.5"}) == {
        "destroy_delay": 0.5
    }


def test_settings_of_an_unknown_provider_are_a_provider_not_found_error() -> None:
    with pytest.raises(ProviderNotFoundError, match="no provider named 'nope'"):
        settings_from_env("nope", environ={})


def test_provider_settings_are_those_of_the_providers_set_up_in_the_environment() -> None:
    environ = {
        "NODEPROV_FAKE_ENV": '{"TOKEN": "t"}',
        "NODEPROV_FAKE_ROOT": "/srv/fake",
        "NODEPROV_LOCAL_ROOT": "/srv/local",
    }
    found = provider_settings_from_env(None, environ=environ)
    assert found == {"fake": {"env": {"TOKEN": "t"}, "root": "/srv/fake"}, "local": {"root": "/srv/local"}}
    named = provider_settings_from_env("fake", {"env": {"TOKEN": "given"}}, environ)
    assert named["fake"] == {"env": {"TOKEN": "given"}, "root": "/srv/fake"}
    assert provider_settings_from_env("needy", {"env": {"A": "b"}}, environ={}) == {
        "needy": {"env": {"A": "b"}}
    }
    assert provider_settings_from_env("nope", environ=environ) == found  # not loadable here: none
    with pytest.raises(ConfigError, match="without a provider"):
        provider_settings_from_env(None, {"env": {"A": "b"}}, environ)


def test_make_provider_lays_the_given_settings_over_the_environment_and_wants_an_image(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NODEPROV_IMAGED_ROOT", str(tmp_path))
    monkeypatch.setenv("NODEPROV_IMAGED_IMAGE", "from-env")
    made = make_provider("imaged", {"provision_delay": 2})
    assert made.settings.model_dump(include={"root", "image", "provision_delay"}) == {
        "root": tmp_path,
        "image": "from-env",
        "provision_delay": 2,
    }
    assert make_provider("imaged", {"image": "given"}).settings.image == "given"
    monkeypatch.delenv("NODEPROV_IMAGED_IMAGE")
    with pytest.raises(ConfigError, match=r"the imaged provider needs an image \(setting 'image'\)"):
        make_provider("imaged", {})


# Providers made once


async def test_a_provider_is_made_once_per_settings_over_the_fleets_environment(tmp_path: Path) -> None:
    async with Fleet({"NODEPROV_FAKE_PROVISION_DELAY": "0.5"}) as fleet:
        one = await fleet.provider("fake", {"root": str(tmp_path), "destroy_delay": 0})
        assert await fleet.provider("fake", {"destroy_delay": 0, "root": str(tmp_path)}) is one
        assert one.settings.provision_delay == 0.5
        other = await fleet.provider("fake", {"root": str(tmp_path), "provision_delay": 0})
        assert other is not one
        assert other.settings.provision_delay == 0
        assert await fleet.provider("fake") not in (one, other)
        with pytest.raises(ProviderNotFoundError):
            await fleet.provider("nope")
        with pytest.raises(ConfigError, match="colour"):
            await fleet.provider("fake", {"colour": "blue"})


async def test_a_fleet_reads_no_environment_it_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEPROV_FAKE_PROVISION_DELAY", "3")
    async with Fleet(environ={}) as fleet:
        assert (await fleet.provider("fake")).settings.provision_delay == 0
    async with Fleet() as fleet:
        assert (await fleet.provider("fake")).settings.provision_delay == 3


async def test_tasks_asking_at_once_get_the_one_provider() -> None:
    made: list[Any] = [None, None]
    async with Fleet(environ={}) as fleet:

        async def ask(index: int) -> None:
            made[index] = await fleet.provider("fake", {"root": "/srv/fake"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, 0)
            tg.start_soon(ask, 1)
    assert made[0] is made[1]


async def test_configured_skips_a_provider_its_environment_does_not_set_up(roots: dict[str, str]) -> None:
    async with Fleet(roots) as fleet:
        made, notes = await fleet.configured()
    assert [provider.name for provider in made] == [
        "closing",
        "down",
        "fake",
        "hanging",
        "imaged",
        "local",
        "logged-out",
        "toolless",
    ]
    assert notes == [NEEDY_SKIPPED]
    async with Fleet({**roots, "NODEPROV_NEEDY_HOST": "h"}) as fleet:
        assert "needy" in [provider.name for provider in (await fleet.configured())[0]]


# Nodes across providers


async def test_find_asks_every_configured_provider_and_passes_over_one_that_fails(
    roots: dict[str, str], tmp_path: Path
) -> None:
    async with Fleet(roots) as fleet:
        node = await (await fleet.provider("local")).provision()
        try:
            found = await fleet.find(node.node_id)  # "down" comes first and cannot be asked
            assert (found.node_id, found.provider) == (node.node_id, "local")
            named = await fleet.find(node.node_id, "local", {"root": str(tmp_path / "local")})
            assert named.node_id == node.node_id
            with pytest.raises(NodeGoneError, match=rf"^no node {node.node_id} in provider 'fake'$"):
                await fleet.find(node.node_id, "fake")
            with pytest.raises(ProviderError, match="engine unreachable"):
                await fleet.find(node.node_id, "down")  # named: its error is the answer
            with pytest.raises(ConfigError, match="host: Field required"):
                await fleet.find(node.node_id, "needy")
            with pytest.raises(ConfigError, match="without a provider"):
                await fleet.find(node.node_id, settings={"root": "/x"})
        finally:
            await node.destroy()
        with pytest.raises(NodeGoneError, match=rf"^no node {node.node_id}$"):
            await fleet.find(node.node_id)


async def test_list_nodes_notes_providers_not_set_up_and_says_which_failed(roots: dict[str, str]) -> None:
    async with Fleet(roots) as fleet:
        on_local = await (await fleet.provider("local")).provision()
        on_fake = await (await fleet.provider("fake")).provision()
        try:
            nodes, notes, failed = await fleet.list_nodes()
            assert sorted((info.node_id, info.provider) for info in nodes) == sorted(
                [(on_local.node_id, "local"), (on_fake.node_id, "fake")]
            )
            assert notes == [
                NEEDY_SKIPPED,
                "logged-out: skipped, not set up here (logged out: log in again)",
            ]
            assert failed == ["down: engine unreachable"]

            only_local = await fleet.list_nodes("local")
            assert ([info.node_id for info in only_local[0]], only_local[1:]) == (
                [on_local.node_id],
                ([], []),
            )
            with pytest.raises(ProviderError, match="engine unreachable"):
                await fleet.list_nodes("down")
            with pytest.raises(ConfigError, match="logged out"):
                await fleet.list_nodes("logged-out")
            with pytest.raises(ConfigError, match="without a provider"):
                await fleet.list_nodes(settings={"root": "/x"})
        finally:
            await on_local.destroy()
            await on_fake.destroy()


async def test_across_keeps_each_providers_failures_in_provider_order(roots: dict[str, str]) -> None:
    async def act(provider: Any) -> tuple[list[str], list[str]]:
        if provider.name == "down":
            raise ProviderError("unreachable")
        return [provider.name], [f"{provider.name}: one node stuck"] if provider.name == "closing" else []

    async with Fleet(roots) as fleet:
        found, _, failed = await fleet.across(act)
    assert found == ["closing", "fake", "hanging", "imaged", "local", "logged-out", "toolless"]
    assert failed == ["closing: one node stuck", "down: unreachable"]


# Readiness


async def test_readiness_of_a_ready_provider(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NODEPROV_LOCAL_ROOT", str(tmp_path / "local"))
    ready = await readiness("local")
    assert ready == Readiness("local", True, "", ())
    assert ready.as_json() == {"name": "local", "ready": True, "error": "", "requirements": []}


async def test_readiness_of_a_provider_not_configured_then_configured_by_the_given_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NODEPROV_NEEDY_HOST", raising=False)
    missing = await readiness("needy")
    assert not missing.ready
    assert missing.error.startswith(
        "not configured: invalid settings for provider 'needy': host: Field required"
    )
    assert (await readiness("needy", {"host": "h"})).ready
    monkeypatch.setenv("NODEPROV_NEEDY_HOST", "h")
    assert (await readiness("needy")).ready


async def test_readiness_says_what_is_missing_and_what_does_not_answer() -> None:
    toolless = await readiness("toolless")
    assert (toolless.ready, toolless.error) == (False, "")
    assert toolless.as_json()["requirements"] == [
        {"name": "tool", "ok": False, "detail": "not on PATH"},
        {"name": "key", "ok": True, "detail": "~/.key"},
    ]
    hanging = await readiness("hanging", probe_timeout=0.1)
    assert (hanging.ready, hanging.error) == (False, "not ready: no answer within 0.1 s")
    unknown = await readiness("nope")
    assert (unknown.ready, unknown.requirements) == (False, ())
    assert unknown.error.startswith("no provider named 'nope' (installed: closing, down, fake")


# Closing


async def test_aclose_closes_each_provider_once_even_when_cancelled() -> None:
    fleet = Fleet(environ={})
    first = await fleet.provider("closing")
    second = await fleet.provider("closing", {"destroy_delay": 1})
    with anyio.CancelScope() as scope:
        scope.cancel()
        await fleet.aclose()  # shielded: the closes get through
    assert (first.closed, second.closed) == (1, 1)  # type: ignore[attr-defined]
    await fleet.aclose()
    assert (first.closed, second.closed) == (1, 1)  # type: ignore[attr-defined]
    again = await fleet.provider("closing")
    assert again is not first  # forgotten when closed: made anew
    async with fleet:
        pass
    assert again.closed == 1  # type: ignore[attr-defined]


def test_the_doubles_are_every_provider_here() -> None:
    assert provider_names() == sorted(["local", *(cls.name for cls in DOUBLES)])
