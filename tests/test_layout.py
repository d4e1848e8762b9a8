"""The shape of the house (see ARCHITECTURE.md), checked from the source: rooms of a size a
newcomer can read, the store free of agent SDKs, the test kit imported only by tests, and
no provider reaching into another's unexported modules."""

from __future__ import annotations

import ast
import gc
import re
import warnings
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*(ROOT / "nodeprov").rglob("*.py"), *(ROOT / "providers").glob("*/nodeprov_*/**/*.py")])
MAX_MODULE_LINES, MAX_CLASS_LINES = 600, 400


def _package(path: Path) -> str:
    """The dotted name of the package ``path`` lies in."""
    if path.is_relative_to(ROOT / "nodeprov"):
        base = ROOT
    else:
        base = ROOT / "providers" / path.relative_to(ROOT / "providers").parts[0]
    return ".".join(path.parent.relative_to(base).parts)


def _parsed(text: str) -> ast.Module:
    """``ast.parse``, the garbage collector held off: CPython 3.11.7 fails a parse ("AST
    constructor recursion depth mismatch", a SystemError; python/cpython#106905) when a
    collection runs a finalizer (an earlier test's leftover subprocess transport) in it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(text)
    finally:
        if enabled:
            gc.enable()


def _imports(path: Path) -> Iterator[str]:
    """The modules ``path`` imports, relative imports resolved."""
    package = _package(path)
    for node in ast.walk(_parsed(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0]
                yield f"{base}.{node.module}" if node.module else base
            elif node.module:
                yield node.module


def _over_the_caps() -> dict[str, str]:
    """Each module over MAX_MODULE_LINES and class over MAX_CLASS_LINES: its name (``path`` or
    ``path: Class``) and size."""
    found = {}
    for path in SOURCES:
        text = path.read_text()
        name = str(path.relative_to(ROOT))
        if (lines := text.count("\n")) > MAX_MODULE_LINES:
            found[name] = f"{lines} lines"
        for node in ast.walk(_parsed(text)):
            size = (node.end_lineno or node.lineno) - node.lineno + 1 if isinstance(node, ast.ClassDef) else 0
            if size > MAX_CLASS_LINES:
                found[f"{name}: {getattr(node, 'name', '')}"] = f"{size} lines"
    return found


def _kept_whole() -> dict[str, str]:
    """ARCHITECTURE.md's "Over the size caps": ``- `NAME`: why it stays whole`` per line."""
    section = (ROOT / "ARCHITECTURE.md").read_text().split("## Over the size caps", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^- `([^`]+)`: (.+)$", section, re.M))


def test_a_room_over_the_size_caps_is_named_with_why_it_stays_whole() -> None:
    """The caps (600 lines a module, 400 a class) detect a smell; they are not a goal: a
    module is split along its seams, never to fit. One over them is named in a warning, and
    ARCHITECTURE.md says why it stays whole (the review of the change that grew it); a reason
    for one no longer over them goes."""
    over, reasons = _over_the_caps(), _kept_whole()
    for name, size in over.items():
        warnings.warn(
            f"{name} is over the size caps ({size}): {reasons.get(name, 'no reason given')}", stacklevel=1
        )
    assert sorted(set(over) - set(reasons)) == [], "say in ARCHITECTURE.md why each stays whole, or split it"
    assert sorted(set(reasons) - set(over)) == [], "a reason for one no longer over the caps"


UPPER_LAYERS = {
    f"nodeprov.{layer}"
    for layer in ("runs", "agents", "offline", "store", "checkpoints", "cli", "testing", "service", "client")
}


def test_the_service_is_a_door_of_its_own() -> None:
    """``service`` (the HTTP API) sits on ``runs`` beside the CLI: only the CLI's ``serve``
    imports it; its client, ``client``, imports only the run events' model, and nothing in
    the package imports the client."""
    found = []
    for path in SOURCES:
        inside = path.relative_to(ROOT).parts[:2]
        for name in _imports(path):
            top = ".".join(name.split(".")[:2])
            if top == "nodeprov.service" and inside not in (("nodeprov", "service"), ("nodeprov", "cli")):
                found.append(f"{path.relative_to(ROOT)}: {name}")
            if top == "nodeprov.client" and inside != ("nodeprov", "client"):
                found.append(f"{path.relative_to(ROOT)}: {name}")
            if (
                inside == ("nodeprov", "client")
                and top.startswith("nodeprov.")
                and name
                not in (
                    "nodeprov.errors",
                    "nodeprov.runs.events",
                )
            ):
                found.append(f"{path.relative_to(ROOT)}: {name}")
    assert found == []


def test_the_core_imports_no_layer_above_it() -> None:
    """The core (``node/``, ``exec/`` and the top-level modules: ``registry``, ``fleet``,
    ``spawn``...) builds on nothing above it; ``__init__`` (which loads the agent registry
    on first use) and ``__main__`` (the CLI's) are the package's doors, not the core."""
    core = [
        *(
            path
            for path in (ROOT / "nodeprov").glob("*.py")
            if path.name not in ("__init__.py", "__main__.py")
        ),
        *(ROOT / "nodeprov" / "node").rglob("*.py"),
        *(ROOT / "nodeprov" / "exec").rglob("*.py"),
    ]
    assert ROOT / "nodeprov" / "fleet.py" in core
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in core
        for name in _imports(path)
        if ".".join(name.split(".")[:2]) in UPPER_LAYERS
    ]
    assert found == []


def test_the_store_imports_no_agent_sdk() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "nodeprov" / "store").rglob("*.py")
        for name in _imports(path)
        if name.split(".")[0] in ("claude_agent_sdk", "openai") or name.startswith("nodeprov.agents")
    ]
    assert found == []


def test_nothing_opens_a_store_with_a_second_copy_of_sqlite() -> None:
    """The store uses apsw's SQLite; the standard library's ``sqlite3`` is another copy of
    SQLite, and two copies in one process with one file open drop each other's locks
    (nodeprov/store/_sqlite.py). Nothing of the project's, its tests included, imports it."""
    everything = [*SOURCES, *(ROOT / "tests").rglob("*.py"), *(ROOT / "integration").rglob("*.py")]
    everything += [*(ROOT / "bench").rglob("*.py")]
    found = [
        f"{path.relative_to(ROOT)}"
        for path in everything
        for node in ast.walk(_parsed(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        if "sqlite3" in [alias.name for alias in node.names] + [getattr(node, "module", None)]
    ]
    assert found == []


def test_only_the_test_kit_imports_the_test_kit() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in SOURCES
        if not path.is_relative_to(ROOT / "nodeprov" / "testing")
        for name in _imports(path)
        if name == "nodeprov.testing" or name.startswith("nodeprov.testing.")
    ]
    assert found == []


@pytest.mark.parametrize("provider", sorted(p.name for p in (ROOT / "providers").iterdir() if p.is_dir()))
def test_a_provider_uses_another_only_through_its_exports(provider: str) -> None:
    own = f"nodeprov_{provider}"
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "providers" / provider).glob(f"{own}/**/*.py")
        for name in _imports(path)
        if name.startswith("nodeprov_") and name.split(".")[0] != own and "." in name
    ]
    assert found == []


def test_tests_on_the_cluster_run_in_the_process_that_has_it() -> None:
    """scripts/test.sh runs three pytest processes, and a session that asks for the Kubernetes
    cluster starts one: a test file using it must be one the script gives the remote process
    (by the patterns of its ``case``), or two clusters' kubelets kill each other's pods; and
    tests/ (a process of its own) never asks for it."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    patterns = next(line for line in script.splitlines() if "remote+=" in line).split(")")[0].split("|")
    remote = [pattern.strip() for pattern in patterns]
    found = [
        path.name
        for path in sorted((ROOT / "integration").glob("test_*.py"))
        if "kubernetes_cluster" in path.read_text()
        and not any(fnmatch(f"integration/{path.name}", pattern) for pattern in remote)
    ]
    assert remote
    assert found == []
    assert [
        path.name
        for path in sorted((ROOT / "tests").glob("test_*.py"))
        if "kubernetes_cluster" in path.read_text() and path.name != "test_layout.py"
    ] == []
