"""The kept-agent trials (tests/kept_trials.py), short and seeded: each face once (finish, a
keeper's SIGTERM, one attach, two at once, attach --pause, pause beside an attach, the
library's adopt and pause), on local nodes: no message lost or repeated, no run said paused
with its agent alive, nothing left. ``NODEPROV_TEST_SEED`` picks another seed;
``python -m tests.kept_trials --rounds 50`` soaks. integration/test_kept_trials_docker.py
runs them on Docker nodes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.kept_trials import FACES, on_local, trials

pytestmark = pytest.mark.anyio

SEED = int(os.environ.get("NODEPROV_TEST_SEED", "1"))


async def test_kept_agents_under_faults_lose_repeat_and_leave_nothing(tmp_path: Path) -> None:
    figures = await trials(SEED, len(FACES), tmp_path, on_local(tmp_path), every_face=True)
    print(figures)  # the figures of this seed, for whoever reads the log
    assert figures["details"] == [], figures
    assert sum(figures["rounds"].values()) == len(FACES)
