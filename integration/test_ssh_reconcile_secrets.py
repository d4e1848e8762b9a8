"""A reconcile gets the secret settings a run never stored (an SSH key's passphrase) from the
same places as any command: `-s` and NODEPROV_<PROVIDER>_*. Without it, `nodeprov gc` says
which setting is missing, at once, and leaves the node; with it, the dead control plane's
node goes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from nodeprov import get_provider
from nodeprov.runs import RunState
from nodeprov.store import NodeRecordState, RunRecord, Store, now

from .cli import settings_environment
from .sshd import running_sshd

pytestmark = pytest.mark.anyio


async def test_gc_takes_the_passphrase_a_run_never_stored(tmp_path: Path) -> None:
    key = tmp_path / "locked"
    await anyio.run_process(["ssh-keygen", "-q", "-t", "ed25519", "-N", "open sesame", "-f", str(key)])
    with running_sshd(client_key=key) as server:
        settings = server.settings("root", root=".nodeprov/reconcile-secrets", passphrase="open sesame")
        provider = get_provider("ssh", **settings)
        node = await provider.provision()
        stored = provider.resolved_settings()
        url = f"sqlite:///{tmp_path}/store.db"
        async with await Store.open(url) as store:
            lease = await store.leases.acquire("a control plane that died", ttl=60)
            await store.leases.release(lease.id)
            session = await store.active_session("default", "claude")
            await store.create_run(
                RunRecord(
                    agent="claude",
                    id="run-0123456789abcdef",
                    session_id=session.id,
                    workspace_id="default",
                    prompt="task",
                    node_provider="ssh",
                    node_settings=json.dumps(stored.storable()),
                    node_secret_fields=json.dumps(stored.secrets_set()),
                    agent_options="{}",
                    state=RunState.RUNNING,
                    outcome=None,
                    error=None,
                    node_id=node.node_id,
                    agent_session_id=None,
                    project_key=None,
                    owner=f"lease:{lease.id}",
                    pause_request=None,
                    created_at=now(),
                    updated_at=now(),
                )
            )
            await store.node_intent(node.node_id, "ssh", "run-0123456789abcdef")
            await store.set_node_state(node.node_id, NodeRecordState.LIVE)
        assert "open sesame" not in json.dumps(stored.storable())  # never stored

        def gc(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "nodeprov", "gc", "-p", "ssh", "--store", url],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                env={**os.environ, "NO_COLOR": "1", **env},
            )

        given = settings_environment("ssh", {k: v for k, v in settings.items() if k != "passphrase"})
        without = await anyio.to_thread.run_sync(gc, given)
        assert without.returncode == 2  # a configuration that cannot work, said at once
        assert "passphrase" in without.stderr
        assert (await provider.attach(node.node_id)).node_id == node.node_id  # still there
        with_it = await anyio.to_thread.run_sync(gc, {**given, "NODEPROV_SSH_PASSPHRASE": "open sesame"})
        assert with_it.returncode == 0, with_it.stderr
        assert f"removed {node.node_id}" in with_it.stdout
        assert node.node_id not in {info.node_id for info in await provider.list_nodes()}
        await provider.aclose()
