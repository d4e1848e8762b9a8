"""The local provider passes the provider conformance suite (no engine needed)."""

from pathlib import Path

import pytest

from nodeprov import get_provider
from nodeprov.testing.conformance import AnyProvider, Leftovers, ProviderConformance


class TestLocalConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, tmp_path: Path) -> AnyProvider:
        return get_provider("local", root=tmp_path / "nodes")

    @pytest.fixture
    def leftovers(self, tmp_path: Path) -> Leftovers:
        async def find(node_id: str) -> list[str]:
            directory = tmp_path / "nodes" / node_id
            return [str(directory)] if directory.exists() else []

        return find
