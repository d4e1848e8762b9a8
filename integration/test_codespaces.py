"""The Codespaces provider's own promises, with the real gh against the FAKE GitHub API (see
:mod:`.github`): what gh is asked, creation answered with 202 and polled, failures that
leave nothing billing, a codespace deleted behind our back, hostile names, adoption after a
crash, garbage collection by lease, a paused run that stops its codespace."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from nodeprov import NodeConfig, SpawnOptions, get_provider
from nodeprov.errors import ConfigError, NodeGoneError, ProvisionError
from nodeprov.runs import NodeReady, NodeReleased, Orchestrator
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import run, unique_marker
from nodeprov_codespaces.provider import display_name

from .agents import require_claude_cli, run_options, until_tool_runs
from .codespaces import REPO, Codespaces, node_directory, node_of, running_codespaces
from .github import TOKEN, Failure
from .sshd import Sshd

pytestmark = pytest.mark.anyio


@pytest.fixture
def codespaces(sshd: Sshd, tmp_path: Path) -> Iterator[Codespaces]:
    with running_codespaces(sshd, tmp_path) as made:
        yield made


def _ours(codespaces: Codespaces, node_id: str) -> list[str]:
    return [c.name for c in codespaces.github.live() if node_of(c.display_name) == node_id]


async def test_create_asks_gh_exactly_what_the_settings_say(codespaces: Codespaces) -> None:
    settings = codespaces.settings(
        branch="feature/x",
        devcontainer_path=".devcontainer/devcontainer.json",
        location="WestEurope",
        idle_timeout_minutes=15,
        retention_period_minutes=90,
    )
    config = NodeConfig()
    async with get_provider("codespaces", **settings) as provider, await provider.provision(config) as node:
        assert (await run(node, "echo", "in the codespace")) == (0, b"in the codespace\n", b"")
    creates = [c for c in codespaces.gh.commands() if c[:2] == ["codespace", "create"]]
    assert creates == [
        [
            "codespace",
            "create",
            f"--repo={REPO}",
            "--machine=basicLinux32gb",
            f"--display-name={display_name(config)}",
            "--idle-timeout=15m",
            "--retention-period=90m",
            "--branch=feature/x",
            "--devcontainer-path=.devcontainer/devcontainer.json",
            "--location=WestEurope",
        ]
    ]
    (posted,) = codespaces.github.seen("POST", "/user/codespaces")
    assert posted.body["idle_timeout_minutes"] == 15
    assert posted.body["retention_period_minutes"] == 90
    assert posted.body["display_name"] == display_name(config)
    assert (posted.body["ref"], posted.body["machine"]) == ("feature/x", "basicLinux32gb")
    assert posted.headers["Authorization"] == f"token {TOKEN}"
    ssh = [c for c in codespaces.gh.commands() if c[:2] == ["codespace", "ssh"]]
    assert ["codespace", "ssh", "--stdio"] in ssh  # asked once whether this gh has the flag
    tunnels = [c for c in ssh if "-c" in c]
    assert tunnels
    assert all(c[2:] == ["-c", c[3], "--stdio", "--", "-i", str(codespaces.sshd.client_key)] for c in tunnels)
    deletes = [c for c in codespaces.gh.commands() if c[:2] == ["codespace", "delete"]]
    assert [c[-1] for c in deletes] == ["--force"]
    assert _ours(codespaces, config.node_id) == []


async def test_a_codespace_accepted_with_202_is_polled_until_available(codespaces: Codespaces) -> None:
    codespaces.github.create_status = 202
    codespaces.github.starting_polls = 3
    async with (
        get_provider("codespaces", **codespaces.settings()) as provider,
        await provider.provision() as node,
    ):
        assert (await run(node, "true"))[0] == 0
        (name,) = _ours(codespaces, node.node_id)
        assert len(codespaces.github.seen("GET", f"/user/codespaces/{name}")) >= 3


async def test_a_codespace_stuck_starting_is_a_clear_error_and_deleted(codespaces: Codespaces) -> None:
    codespaces.github.stuck = True
    config = NodeConfig()
    async with get_provider("codespaces", **codespaces.settings(ready_timeout=3.0)) as provider:
        with pytest.raises(ProvisionError, match="still Starting"):
            await provider.provision(config)
    assert _ours(codespaces, config.node_id) == []  # nothing left billing
    assert codespaces.github.seen("DELETE", "/user/codespaces/.*")


@pytest.fixture
def short_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A create with no answer (cut off, a 5xx) is looked for again for 6 s, not 20: the fake
    GitHub makes a codespace within 3 s of such a request, if at all."""
    monkeypatch.setattr("nodeprov_codespaces.provider._CREATE_SETTLE", 6.0)


@pytest.mark.parametrize(("status", "error"), [(422, ConfigError), (403, ConfigError), (503, ProvisionError)])
@pytest.mark.usefixtures("short_settle")
async def test_a_refused_create_is_a_clear_error_and_leaves_nothing(
    codespaces: Codespaces, status: int, error: type[Exception]
) -> None:
    codespaces.github.failures.append(Failure("POST", "/user/codespaces", status, "no codespace for you"))
    config = NodeConfig()
    async with get_provider("codespaces", **codespaces.settings()) as provider:
        with pytest.raises(error, match=f"HTTP {status}: no codespace for you"):
            await provider.provision(config)
    assert _ours(codespaces, config.node_id) == []
    assert not node_directory(config.node_id).exists()


async def test_a_codespace_deleted_behind_our_back_mid_run(codespaces: Codespaces) -> None:
    marker = unique_marker()
    async with get_provider("codespaces", **codespaces.settings()) as provider:
        node = await provider.provision()
        process = await node.spawn(SpawnOptions("sleep", [marker]))
        (name,) = _ours(codespaces, node.node_id)
        deleted = await anyio.run_process(
            [codespaces.gh.gh, "codespace", "delete", "-c", name, "--force"],
            env={**os.environ, "GITHUB_API_URL": codespaces.github.url, "GH_ENTERPRISE_TOKEN": TOKEN},
        )
        assert deleted.returncode == 0
        with anyio.fail_after(30), pytest.raises(NodeGoneError):
            await process.wait()
        with anyio.fail_after(30), pytest.raises(NodeGoneError, match="404"):
            await node.spawn(SpawnOptions("true"))
        with pytest.raises(NodeGoneError):
            await provider.attach(node.node_id)
        await node.destroy()  # quiet: nothing is left to destroy
        await process.aclose()


HOSTILE = [
    "x;touch${IFS}/tmp/nodeprov-pwned",
    "$(touch /tmp/nodeprov-pwned)",
    "`id`",
    "-b",
    "bra nch 'q\" ünï",
]


@pytest.mark.parametrize("branch", HOSTILE)
async def test_hostile_branches_reach_github_verbatim(codespaces: Codespaces, branch: str) -> None:
    codespaces.github.add_repo(REPO, branches=("main", branch))
    async with (
        get_provider("codespaces", **codespaces.settings(branch=branch)) as provider,
        await provider.provision() as node,
    ):
        assert (await run(node, "true"))[0] == 0
    (posted,) = codespaces.github.seen("POST", "/user/codespaces")
    assert posted.body["ref"] == branch
    assert not await anyio.Path("/tmp/nodeprov-pwned").exists()


@pytest.mark.parametrize("repo", ["octo-org/$(reboot)", "octo-org/x;id", "octo-org/`id`", "-R/-rf"])
async def test_hostile_repositories_are_refused_verbatim(codespaces: Codespaces, repo: str) -> None:
    async with get_provider("codespaces", **codespaces.settings(repo=repo)) as provider:
        with pytest.raises(ProvisionError, match="HTTP 404"):
            await provider.provision()
    assert [r.path for r in codespaces.github.seen("GET", "/repos/.*")] == [f"/repos/{repo.lower()}"]


async def test_a_provision_after_a_crash_adopts_the_codespace_left(codespaces: Codespaces) -> None:
    """A control plane that died after gh created the codespace: the retry finds it by its
    name and uses it; there is never a second one."""
    config = NodeConfig()
    created = await anyio.run_process(
        [
            codespaces.gh.gh,
            "codespace",
            "create",
            f"--repo={REPO}",
            "--machine=basicLinux32gb",
            f"--display-name={display_name(config)}",
        ],
        env={**os.environ, "GITHUB_API_URL": codespaces.github.url, "GH_ENTERPRISE_TOKEN": TOKEN},
    )
    left = created.stdout.decode().strip()
    async with (
        get_provider("codespaces", **codespaces.settings()) as provider,
        await provider.provision(config) as node,
    ):
        assert _ours(codespaces, config.node_id) == [left]
        assert (await run(node, "true"))[0] == 0
    assert _ours(codespaces, config.node_id) == []


async def test_a_failed_codespace_of_the_node_is_never_adopted(codespaces: Codespaces) -> None:
    """GitHub lists a codespace of this very provision as Failed: a fresh one is made, and
    the failed one is left to GitHub."""
    config = NodeConfig()
    created = await anyio.run_process(
        [
            codespaces.gh.gh,
            "codespace",
            "create",
            f"--repo={REPO}",
            "--machine=basicLinux32gb",
            f"--display-name={display_name(config)}",
        ],
        env={**os.environ, "GITHUB_API_URL": codespaces.github.url, "GH_ENTERPRISE_TOKEN": TOKEN},
    )
    failed = created.stdout.decode().strip()
    codespaces.github.codespaces[failed].state = "Failed"
    async with (
        get_provider("codespaces", **codespaces.settings()) as provider,
        await provider.provision(config) as node,
    ):
        assert node.codespace != failed  # type: ignore[attr-defined]
        assert (await run(node, "true"))[0] == 0
    assert [c.name for c in codespaces.github.live() if c.state == "Failed"] == [failed]


@pytest.mark.usefixtures("short_settle")
async def test_a_create_cut_off_in_flight_is_found_and_deleted(codespaces: Codespaces) -> None:
    """The provision is cancelled while its create request is on its way (GitHub makes the
    codespace a moment later, and gh never says its name): the rollback looks again, finds
    the codespace and deletes it."""
    codespaces.github.create_delay = 3.0
    config = NodeConfig()
    async with (
        get_provider("codespaces", **codespaces.settings()) as provider,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(provider.provision, config)
        with anyio.fail_after(60):
            while not codespaces.github.seen("POST", "/user/codespaces"):  # noqa: ASYNC110 - gh's requests
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()  # the rollback, shielded, runs before the task group ends
    with anyio.fail_after(60):
        while codespaces.github.made == 0:  # noqa: ASYNC110 - the fake's own thread
            await anyio.sleep(0.05)
    assert _ours(codespaces, config.node_id) == []  # made after all, and deleted


async def test_gc_deletes_codespaces_no_live_lease_owns_and_never_others(
    codespaces: Codespaces, store: Store
) -> None:
    dead = await store.leases.acquire("a control plane that is gone", ttl=60)
    await store.leases.release(dead.id)
    env = {**os.environ, "GITHUB_API_URL": codespaces.github.url, "GH_ENTERPRISE_TOKEN": TOKEN}
    foreign = await anyio.run_process(
        [
            codespaces.gh.gh,
            "codespace",
            "create",
            f"--repo={REPO}",
            "--machine=basicLinux32gb",
            "--display-name=mine",
        ],
        env=env,
    )
    async with (
        Orchestrator(store) as orchestrator,
        get_provider("codespaces", **codespaces.settings()) as provider,
    ):
        orphan = await provider.provision(NodeConfig(owner=f"lease:{dead.id}"))
        owned = await provider.provision(NodeConfig(owner=orchestrator.owner))
        try:
            report = await orchestrator.collect_garbage(provider)
            assert [info.node_id for info in report.reaped] == [orphan.node_id]
            assert _ours(codespaces, orphan.node_id) == []
            assert len(_ours(codespaces, owned.node_id)) == 1
            assert foreign.stdout.decode().strip() in [c.name for c in codespaces.github.live()]
        finally:
            await owned.destroy()
            await orphan.destroy()


async def test_a_paused_run_stops_its_kept_codespace_and_the_resume_starts_it(
    codespaces: Codespaces, store: Store, scripted_model: ScriptedModel
) -> None:
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    async with Orchestrator(store) as orchestrator:
        run_ = await orchestrator.start(
            "remember: the bird is a wren",
            options=run_options(scripted_model),
            provider="codespaces",
            provider_settings=codespaces.settings(),
        )
        await until_tool_runs(marker)
        snapshot = await run_.pause("human", "review", keep_node=True)
        assert snapshot.node_id is not None
        released = [e async for e in run_.events() if isinstance(e, NodeReleased)][-1]
        assert (released.kept, released.suspended) == (True, True)
        (name,) = _ours(codespaces, snapshot.node_id)
        assert codespaces.github.codespaces[name].state == "Shutdown"  # no compute billed while paused

        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("it was a wren")])
        resumed = await orchestrator.resume(
            snapshot.token,
            message="which bird?",
            options=run_options(scripted_model),
            provider_settings={"token": TOKEN},  # a secret: never stored, so given again
        )
        assert await resumed.wait() == "ok", resumed.error
        ready = [e async for e in resumed.events() if isinstance(e, NodeReady)][-1]
        assert (ready.node_id, ready.reused) == (snapshot.node_id, True)
        assert codespaces.github.seen("POST", f"/user/codespaces/{name}/start")  # started again
    seen = scripted_model.agent_requests[before].text()
    assert "remember: the bird is a wren" in seen
    assert "which bird?" in seen
    assert _ours(codespaces, snapshot.node_id) == []
    assert json.dumps(codespaces.gh.commands()).count(TOKEN) == 0  # never on gh's command line
