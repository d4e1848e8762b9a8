"""The kept-agent trials (tests/kept_trials.py) on Docker nodes, each face once: the CLI
SIGKILLed mid-turn and its run taken over by one attach, two at once, ``attach --pause``,
``pause`` beside an attach and the library's adopt and pause, and a keeper's SIGTERM, with the
fake agent in the container: no message lost or repeated, no run said paused with its agent
alive, no process and no container left. ``python -m tests.kept_trials --docker IMAGE``
soaks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.kept_trials import FACES, on_docker, trials

pytestmark = pytest.mark.anyio

SEED = int(os.environ.get("NODEPROV_TEST_SEED", "1"))


async def test_kept_agents_on_docker_under_faults_lose_repeat_and_leave_nothing(
    tmp_path: Path, base_image: str
) -> None:
    figures = await trials(SEED, len(FACES), tmp_path, on_docker(tmp_path, base_image), every_face=True)
    print(figures)
    assert figures["details"] == [], figures
    assert sum(figures["rounds"].values()) == len(FACES)
