"""The docs' example (docs/testing.md) of a control plane's tests with nodeprov's test
containers passes, run as a user runs it: its code block, alone in a directory, under
pytest in a process of its own (nodeprov's plugin loaded by its entry point, none of this
suite's fixtures)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTING_PAGE = Path(__file__).parents[1] / "docs" / "testing.md"
SECTION = "## Throwaway engines in containers"


def readme_example() -> str:
    """The first Python code block of docs/testing.md's section on the test containers."""
    section = TESTING_PAGE.read_text().split(SECTION, 1)[1]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0] + "\n"


def test_the_readme_example_passes(tmp_path: Path, nodeprov_base_image: str) -> None:
    project = tmp_path / "control-plane"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_ssh_nodes.py").write_text(readme_example())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--basetemp={tmp_path / 'basetemp'}",
            "tests",
        ],
        cwd=project,
        env={**os.environ, "NODEPROV_TEST_BASE_IMAGE": nodeprov_base_image},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout
