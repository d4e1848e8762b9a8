"""The check that only NodeprovError escapes the public API can fail, and spares what it must."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from nodeprov import NodeGoneError, get_provider
from nodeprov.testing.exception_check import watch_public_api
from nodeprov.testing.fake_provider import FakeProvider

pytestmark = pytest.mark.anyio


@pytest.mark.foreign_exceptions
async def test_a_foreign_exception_from_the_library_is_a_violation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    async def broken_list(self: FakeProvider) -> list[object]:
        return [json.loads("{")]  # raised in the standard library: not the caller's code

    monkeypatch.setattr(FakeProvider, "list_nodes", broken_list)
    provider = get_provider("fake", root=str(tmp_path))
    with watch_public_api(monkeypatch) as violations:
        with pytest.raises(json.JSONDecodeError):
            await provider.list_nodes()
        with pytest.raises(json.JSONDecodeError):
            await provider.collect_garbage()  # the outermost call is the one reported
    assert [line.split(":")[0] for line in violations] == [
        "FakeProvider.list_nodes raised JSONDecodeError",
        "NodeProvider.collect_garbage raised JSONDecodeError",
    ]


async def test_nodeprov_errors_and_the_callers_own_exceptions_pass(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    provider = get_provider("fake", root=str(tmp_path))

    async def failing_stream() -> AsyncIterator[bytes]:
        yield b"part"
        raise RuntimeError("the caller's stream broke")

    with watch_public_api(monkeypatch) as violations:
        with pytest.raises(NodeGoneError):
            await provider.attach("np-none")
        async with await provider.provision() as node:
            with pytest.raises(RuntimeError):
                await node.write_file("f", failing_stream())
    assert violations == []
