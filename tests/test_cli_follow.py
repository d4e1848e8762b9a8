"""`nodeprov logs --follow` of a run whose control plane died (SIGKILLed: no last event)
ends once that control plane's lease has expired, saying so, instead of waiting for ever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from nodeprov.runs import RunStarted, RunState
from nodeprov.store import EventRecord, RunRecord, Store, now

pytestmark = pytest.mark.anyio


async def test_following_a_run_whose_control_plane_died_ends(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    async with await Store.open(url) as store:
        lease = await store.leases.acquire("a control plane SIGKILLed mid-run", ttl=60)
        await store.leases.release(lease.id)  # as expiry would: it is gone
        session = await store.active_session("default", "claude")
        await store.create_run(
            RunRecord(
                agent="claude",
                id="run-0123456789abcdef",
                session_id=session.id,
                workspace_id="default",
                prompt="task",
                node_provider="local",
                node_settings="{}",
                agent_options="{}",
                state=RunState.RUNNING,
                outcome=None,
                error=None,
                node_id=None,
                agent_session_id=None,
                project_key=None,
                owner=f"lease:{lease.id}",
                pause_request=None,
                created_at=now(),
                updated_at=now(),
            )
        )
        started = RunStarted(run_id="run-0123456789abcdef", seq=1, at=now(), prompt="task", provider="local")
        await store.append_events(
            [EventRecord(started.run_id, 1, started.kind, started.at, json.dumps(started.to_json()))]
        )
    followed = await anyio.to_thread.run_sync(lambda: _follow(url))
    assert followed.returncode == 1
    assert [json.loads(line)["type"] for line in followed.stdout.splitlines()] == ["run.started"]
    assert "control plane is gone" in followed.stderr


def _follow(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", "logs", "run-0123456789abcdef", "--follow", "--json"],
        capture_output=True,
        text=True,
        timeout=60,  # it followed for ever
        check=False,
        env={**os.environ, "NODEPROV_STORE": url, "NO_COLOR": "1"},
    )
