"""What nodeprov and its providers export: pinned here, documented in the README ("What the
packages export"), and defined (``__all__``) in every public module."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

LIBRARY_PAGE = Path(__file__).resolve().parent.parent / "docs" / "library.md"

EXPORTS = {
    "nodeprov": [
        "LABEL_EXPIRES_AT",
        "LABEL_NODE_ID",
        "LABEL_OWNER",
        "LABEL_SESSION_ID",
        "AgentError",
        "AgentExitError",
        "AgentNotFoundError",
        "AgentOutputError",
        "CommandNotFoundError",
        "ConfigError",
        "DeadlineError",
        "ImageBlock",
        "NodeConfig",
        "NodeFileError",
        "NodeFileNotFoundError",
        "NodeGoneError",
        "NodeHandle",
        "NodeInfo",
        "NodePathError",
        "NodeProvider",
        "NodeSuspendedError",
        "NodeprovError",
        "Prompt",
        "ProviderError",
        "ProviderNotFoundError",
        "ProviderSettings",
        "ProvisionError",
        "Requirement",
        "Rollback",
        "RunStateError",
        "SpawnError",
        "SpawnFn",
        "SpawnOptions",
        "SpawnedProcess",
        "StopPolicy",
        "StoreError",
        "TextBlock",
        "TokenError",
        "abandoned",
        "agent_class",
        "agent_names",
        "get_agent",
        "get_provider",
        "owner_alive",
        "provider_class",
        "provider_names",
        "route_model",
        "secret_field",
    ],
    "nodeprov.fleet": [
        "Fleet",
        "Readiness",
        "check_image",
        "loaded_provider_class",
        "make_provider",
        "provider_settings_from_env",
        "readiness",
        "settings_from_env",
    ],
    "nodeprov.checkpoints": [
        "SECRET_PATTERNS",
        "Capture",
        "Changes",
        "DirectoryObjects",
        "Entry",
        "Manifest",
        "ObjectStore",
        "Piece",
        "capture",
        "changes",
        "open_objects",
        "restore",
    ],
    "nodeprov_local": ["LocalNode", "LocalProcess", "LocalProvider", "LocalSettings"],
    "nodeprov_docker": ["DockerMount", "DockerNode", "DockerProvider", "DockerSettings"],
    "nodeprov_ssh": [
        "NODE_MARKER",
        "CommandLink",
        "Link",
        "MachineNode",
        "SshHostKeyError",
        "SshLoginSettings",
        "SshNode",
        "SshNodeFields",
        "SshNodeSettings",
        "SshNodes",
        "SshProcess",
        "SshProvider",
        "SshSessionSettings",
        "SshSettings",
        "Tunnel",
    ],
    "nodeprov_ec2": ["Ec2Node", "Ec2Provider", "Ec2Settings"],
    "nodeprov_codespaces": ["CodespaceNode", "CodespacesProvider", "CodespacesSettings"],
    "nodeprov_kubernetes": [
        "KubernetesNode",
        "KubernetesProvider",
        "KubernetesSettings",
        "PodProcess",
        "Toleration",
    ],
}

PACKAGES = [name for name in EXPORTS if "." not in name]


def _public_modules(name: str) -> list[ModuleType]:
    module = importlib.import_module(name)
    found = [module]
    for info in pkgutil.iter_modules(getattr(module, "__path__", ()), f"{name}."):
        if not info.name.rpartition(".")[2].startswith("_"):
            found += _public_modules(info.name)
    return found


def _documented() -> dict[str, set[str]]:
    """The README's "What the packages export": one bullet per package or module,
    ``- `NAME`:`` followed by its names in backticks (the bullet may run over several
    lines)."""
    text = LIBRARY_PAGE.read_text()
    section = text.split("## What the packages export", 1)[1].split("\n#", 1)[0]
    documented: dict[str, set[str]] = {}
    for bullet in re.split(r"\n(?=- `)", section):
        if match := re.match(r"- `([a-z0-9_.]+)`:(.*)", bullet, re.S):
            documented[match[1]] = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", match[2]))
    return documented


@pytest.mark.parametrize("package", EXPORTS)
def test_a_package_exports_exactly_what_is_pinned_and_each_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(EXPORTS[package])
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"


def test_the_docs_say_what_each_package_exports() -> None:
    assert _documented() == {package: set(names) for package, names in EXPORTS.items()}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_module_says_what_it_exports(package: str) -> None:
    """Every module whose name has no leading underscore defines ``__all__``, and every name
    in it exists."""
    for module in _public_modules(package):
        assert hasattr(module, "__all__"), f"{module.__name__} has no __all__"
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, f"{module.__name__}.__all__ names what it lacks: {missing}"
