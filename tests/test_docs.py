"""The documentation site (``docs/``, MkDocs) and the README: the site builds with
``mkdocs build --strict`` (every internal link and anchor resolves, every page is in the
navigation), and every code block is either run here or says why not.

A code block is preceded by ``<!-- runs -->`` or ``<!-- not run: WHY -->``. A block that runs
is executed as a reader would: a ``console`` or ``sh`` block's ``$`` lines in one shell (each
must succeed), a ``python`` block as a script, in a directory of its own with a store and
local nodes of its own, on the offline scripted model (nothing leaves this machine)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
_FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
_MARK = re.compile(r"<!-- (runs|not run: [^>]+) -->\s*$")
_TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    body: str
    runs: bool | None  # None: no marker

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        indent = len(match["indent"])
        body = "\n".join(line[indent:] for line in match["body"].splitlines())
        runs = None if mark is None else mark.group(1) == "runs"
        found.append(Block(page, text.count("\n", 0, match.start()) + 1, match["lang"], body, runs))
    return found


BLOCKS = [block for page in PAGES for block in _blocks(page)]
RUNNABLE = [block for block in BLOCKS if block.runs]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr
    for page in ("cli/index.html", "service/api/index.html", "library/index.html"):
        assert (tmp_path / "site" / page).stat().st_size > 20_000, f"{page} was not generated"


def test_every_code_block_runs_or_says_why_not() -> None:
    unmarked = [block.where for block in BLOCKS if block.runs is None]
    assert unmarked == [], "mark each block <!-- runs --> or <!-- not run: WHY -->"
    assert RUNNABLE, "no example runs"
    assert all(block.lang in ("console", "sh", "python") for block in RUNNABLE), [
        (b.where, b.lang) for b in RUNNABLE
    ]


def _commands(body: str) -> str:
    """A console block's commands (``$`` lines, with their ``\\`` continuations)."""
    lines: list[str] = []
    taking = False
    for line in body.splitlines():
        if line.startswith("$ "):
            lines.append(line[2:])
            taking = line.endswith("\\")
        elif taking:
            lines.append(line)
            taking = line.endswith("\\")
    return "\n".join(lines) if any(line.startswith("$ ") for line in body.splitlines()) else body


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda block: block.where)
def test_an_example_runs_as_written(block: Block, tmp_path: Path) -> None:
    environ = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "NODEPROV_STORE": f"sqlite:///{tmp_path}/store.db",
        "XDG_RUNTIME_DIR": str(tmp_path),  # local nodes under it
        "XDG_STATE_HOME": str(tmp_path / "state"),  # the default store (Store.open()) under it
        "NO_COLOR": "1",
    }
    if block.lang == "python":
        (tmp_path / "example.py").write_text(block.body)
        command = [sys.executable, "example.py"]
    else:
        command = ["bash", "-euo", "pipefail", "-c", _commands(block.body)]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=_TIMEOUT, check=False, env=environ
    )
    assert done.returncode == 0, f"{block.where}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
