from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Collection
from contextlib import suppress
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.to_thread
import asyncssh
from pydantic import Field

from nodeprov.errors import ConfigError, NodeGoneError, NodeprovError, ProviderError, ProvisionError
from nodeprov.node import (
    LABEL_NODE_ID,
    NodeConfig,
    NodeHandle,
    NodeInfo,
    NodeProvider,
    ProviderSettings,
    Rollback,
    secret_field,
)
from nodeprov_ssh import (
    CommandLink,
    Link,
    MachineNode,
    SshNode,
    SshNodeFields,
    SshNodes,
    SshSessionSettings,
    Tunnel,
)

__all__ = [
    "DISPLAY_PREFIX",
    "MAX_NODE_ID",
    "MIN_GH",
    "CodespaceNode",
    "CodespacesProvider",
    "CodespacesSettings",
    "display_name",
    "gh_environment",
    "gh_error",
]

logger = logging.getLogger("nodeprov.codespaces")

DISPLAY_PREFIX = "nodeprov-"
"""Every codespace nodeprov makes is named ``nodeprov-NODE_ID.MARK``, MARK the first digits
of its provision's mark (codespaces carry no labels): how nodeprov finds its own, and how a
retried provision tells the codespace its earlier attempt made from another's."""
_MARK_DIGITS = 8
_MAX_DISPLAY_NAME = 48  # GitHub's limit, which gh checks
MAX_NODE_ID = _MAX_DISPLAY_NAME - len(DISPLAY_PREFIX) - 1 - _MARK_DIGITS
MIN_GH = (2, 20, 0)
"""The oldest gh known to have every ``codespace create`` flag used here."""
_TRANSITIONAL = {
    "Queued",
    "Provisioning",
    "Awaiting",
    "Created",
    "Starting",
    "Rebuilding",
    "Updating",
    "Unknown",
}
_DEAD = {"Failed", "Deleted", "Unavailable", "Archived", "Moved"}
_STOPPED = {"Shutdown", "ShuttingDown"}
_DELETE_TIMEOUT = 120.0
_CREATE_SETTLE = 20.0  # how long a create request cut off in flight may still make a codespace
_LIST_FIELDS = "name,displayName,state,repository,createdAt"


class CodespacesSettings(SshSessionSettings, SshNodeFields):
    """Settings of the Codespaces provider: what each codespace is made from, how long
    GitHub keeps it, and the gh it is driven with. gh's own login is used unless ``token``
    is given (``GH_TOKEN``, ``gh auth login -s codespace``)."""

    # Not the repository (the operator's account reaches its private ones), nor the machine
    # (it costs), nor gh, its API or its token (where the operator's credentials go).
    caller_settings: ClassVar[frozenset[str]] = frozenset(
        {"ready_timeout", "spawn_timeout", "eof_grace", "term_grace"}
    )

    repo: str = Field(pattern=r"^[^/\s]+/[^/\s]+$", description="Repository of the codespaces: OWNER/NAME.")
    machine: str = Field(
        min_length=1,
        description="Machine type (gh codespace create --machine), e.g. basicLinux32gb; "
        "required, since gh cannot choose without a terminal.",
    )
    branch: str | None = Field(default=None, description="Branch to check out; default: the repository's.")
    devcontainer_path: str | None = Field(
        default=None, description="Path of the devcontainer.json in the repository; default: gh's choice."
    )
    location: str | None = Field(
        default=None, description="Region (EastUs, WestEurope, ...); default: GitHub's."
    )
    idle_timeout_minutes: int = Field(
        default=30,
        ge=5,
        le=240,
        description="Minutes without activity after which GitHub stops the codespace (no compute "
        "billed once stopped): the bound on a codespace whose control plane is lost.",
    )
    retention_period_minutes: int = Field(
        default=1440,
        ge=0,
        le=43200,
        description="Minutes a stopped codespace is kept before GitHub deletes it (a kept node of "
        "a paused run is stopped: a pause longer than this resumes on a new codespace).",
    )
    ready_timeout: float = Field(
        default=600.0, gt=0, description="Seconds a new codespace may take to become Available."
    )
    gh: str = Field(default="gh", description="The gh executable: a path, or a name looked up on PATH.")
    api_url: str | None = Field(
        default=None,
        description="GitHub API URL for gh (GITHUB_API_URL), for GitHub Enterprise; default: gh's.",
    )
    token: str | None = secret_field(
        default=None,
        description="GitHub token with the codespace scope, given to gh (GH_TOKEN, and "
        "GH_ENTERPRISE_TOKEN for an api_url of GitHub Enterprise); default: gh's own login.",
    )
    user: str | None = Field(default="codespace", description="User to log in to the codespace as.")
    key_files: list[str] | None = Field(
        default=None,
        description="Private key to log in with, which gh has the codespace accept; default: "
        "~/.ssh/codespaces.auto, made when missing, as gh makes it.",
    )


def display_name(config: NodeConfig) -> str:
    """The display name of the codespace of node ``config.node_id``, made by that provision.

    Raises:
        ConfigError: the node id is too long for one.
    """
    if len(config.node_id) > MAX_NODE_ID:
        raise ConfigError(
            f"node id {config.node_id!r} is too long for a codespace (at most {MAX_NODE_ID} characters)"
        )
    return f"{DISPLAY_PREFIX}{config.node_id}.{config.provision_mark[:_MARK_DIGITS]}"


def _node_id(codespace: dict[str, Any]) -> str | None:
    """The node id a codespace's display name names, if nodeprov made it."""
    name = str(codespace.get("displayName") or "")
    if not name.startswith(DISPLAY_PREFIX):
        return None
    return name[len(DISPLAY_PREFIX) :].partition(".")[0] or None


def _made_by(codespace: dict[str, Any], config: NodeConfig) -> bool:
    """Whether ``config``'s provision made the codespace (its display name carries the mark)."""
    return str(codespace.get("displayName") or "") == display_name(config)


def gh_environment(settings: CodespacesSettings) -> dict[str, str]:
    """gh's environment: this process's (gh's login and configuration live there), never
    prompting or checking for updates, with the settings' API URL and token."""
    env = {
        **os.environ,
        "GH_PROMPT_DISABLED": "1",
        "GH_NO_UPDATE_NOTIFIER": "1",
        "GH_NO_EXTENSION_UPDATE_NOTIFIER": "1",
        "GH_SPINNER_DISABLED": "1",
        "NO_COLOR": "1",
    }
    if settings.api_url:
        env["GITHUB_API_URL"] = settings.api_url
    if settings.token:
        env["GH_TOKEN"] = env["GH_ENTERPRISE_TOKEN"] = settings.token
    return env


def gh_error(command: str, code: int, stderr: str) -> NodeprovError:
    """gh's failure as nodeprov's: not logged in, a refused token or a bad request are
    :class:`ConfigError`, a missing codespace :class:`NodeGoneError`."""
    said = stderr.strip()[-800:] or f"exit status {code}"
    message = f"gh {command}: {said}"
    if code == 4:
        return ConfigError(f"gh is not logged in (gh auth login -s codespace, or a token): {said}")
    if status := re.search(r"HTTP (\d{3})", said):
        http = int(status[1])
        if http == 404:
            return NodeGoneError(message)
        if http in (401, 403):
            return ConfigError(f"{message} (a token with the codespace scope: gh auth refresh -s codespace)")
        if http in (400, 422):
            return ConfigError(message)
    if "no such machine" in said or "invalid argument" in said:
        return ConfigError(message)
    return ProviderError(message)


async def _ensure_key(path: Path) -> None:
    """Make the ed25519 key ``path`` (and ``.pub``) if it is missing, as gh does."""

    def make() -> None:
        if path.exists():
            return
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = asyncssh.generate_private_key("ssh-ed25519", comment="codespaces.auto")
        key.write_private_key(str(path))
        path.chmod(0o600)
        key.write_public_key(f"{path}.pub")

    await anyio.to_thread.run_sync(make)


class CodespaceNode(MachineNode):
    """A node that is a codespace; see :mod:`nodeprov_codespaces`. Suspending it stops the
    codespace (no compute billed; its disk stays until the retention period ends); waking
    connects again, which starts it."""

    def __init__(
        self,
        *,
        provider: CodespacesProvider,
        node_id: str,
        codespace: str,
        state: str,
        ssh: SshNode | None = None,
    ) -> None:
        super().__init__(
            ssh=ssh,
            suspended=state in _STOPPED,
            node_id=node_id,
            provider=CodespacesProvider.name,
            labels=ssh.labels if ssh else {LABEL_NODE_ID: node_id},
            workdir=ssh.workdir if ssh else "/",
            base_env=ssh.base_env if ssh else {},
            tool_paths=ssh.tool_paths if ssh else {},
        )
        self.codespace = codespace
        self._provider = provider

    async def _reach(self) -> SshNodes:
        return await self._provider.ssh_to(self.codespace)  # gh starts a stopped codespace

    async def _remove(self) -> None:
        await self._provider.delete_codespace(self.codespace)

    def _attached(self, ssh: SshNode) -> None:
        super()._attached(ssh)
        self.labels, self.workdir = ssh.labels, ssh.workdir  # only its record knows them

    async def _suspend(self) -> None:
        self._ssh = None
        await self._provider.stop(self.codespace)

    async def _wake(self) -> None:
        self._ssh = None
        await self._connected()


class CodespacesProvider(NodeProvider[CodespacesSettings]):
    """Nodes as GitHub Codespaces; see :mod:`nodeprov_codespaces`."""

    name: ClassVar[str] = "codespaces"
    settings_model: ClassVar[type[ProviderSettings]] = CodespacesSettings

    def __init__(self, settings: CodespacesSettings) -> None:
        super().__init__(settings)
        self._env = gh_environment(settings)
        self._key = Path(
            settings.key_files[0] if settings.key_files else "~/.ssh/codespaces.auto"
        ).expanduser()
        self._login = settings.model_copy(update={"key_files": [str(self._key)]})
        self._nodes: dict[str, SshNodes] = {}
        self._stdio: bool | None = None

    # -- gh -----------------------------------------------------------------------------

    async def gh(self, *args: str, seconds: float = 120.0) -> str:
        """Run gh with ``args``; its stdout.

        Raises:
            ConfigError: gh cannot run, is not logged in, or refused the request.
            NodeGoneError: the codespace does not exist.
            ProviderError: gh failed otherwise, or took longer than ``seconds``.
        """
        command = " ".join(args[:2])
        try:
            with anyio.fail_after(seconds):
                result = await anyio.run_process([self.settings.gh, *args], env=self._env, check=False)
        except OSError as error:
            raise ConfigError(f"cannot run gh ({self.settings.gh}): {error}") from None
        except TimeoutError:
            raise ProviderError(f"gh {command}: no answer in {seconds:.0f}s") from None
        if result.returncode != 0:
            raise gh_error(command, result.returncode, result.stderr.decode(errors="replace"))
        return result.stdout.decode(errors="replace")

    async def codespaces(self) -> list[dict[str, Any]]:
        """The codespaces nodeprov made (``gh codespace list``), whatever their repository."""
        out = await self.gh("codespace", "list", "--limit", "10000", "--json", _LIST_FIELDS)
        return [c for c in json.loads(out or "[]") if _node_id(c)]

    async def find(self, node_id: str) -> dict[str, Any]:
        """The codespace of ``node_id`` (the oldest, should there be more).

        Raises:
            NodeGoneError: there is none.
        """
        found = [c for c in await self.codespaces() if _node_id(c) == node_id and c["state"] not in _DEAD]
        if not found:
            raise NodeGoneError(f"no codespace for node {node_id}")
        if len(found) > 1:
            logger.warning("node %s has %d codespaces: using the oldest", node_id, len(found))
        return min(found, key=lambda codespace: str(codespace.get("createdAt", "")))

    async def state(self, codespace: str) -> str:
        out = await self.gh("codespace", "view", "-c", codespace, "--json", "state")
        return str(json.loads(out)["state"])

    async def stop(self, codespace: str) -> None:
        """Stop the codespace (fine if it is not running). Its connections go with it, and
        the host key they pinned: the next connection, through gh, starts afresh."""
        await self._forget(codespace)
        try:
            await self.gh("codespace", "stop", "-c", codespace)
        except ProviderError as error:
            if "is not running" not in str(error):
                raise

    async def _forget(self, codespace: str) -> None:
        if nodes := self._nodes.pop(codespace, None):
            await nodes.link.aclose()

    async def delete(self, node_id: str, *, sparing: Collection[str] = ()) -> None:
        """Delete every codespace of ``node_id`` (but those named in ``sparing``) and confirm
        each is gone; fine if none is."""
        for codespace in await self.codespaces():
            if _node_id(codespace) == node_id and codespace["name"] not in sparing:
                await self.delete_codespace(str(codespace["name"]))

    async def delete_codespace(self, name: str) -> None:
        """Delete the codespace ``name`` and confirm it is gone; fine if it is."""
        with suppress(NodeGoneError):
            await self.gh("codespace", "delete", "-c", name, "--force")
        await self._until_gone(name)
        await self._forget(name)

    async def _until_gone(self, codespace: str) -> None:
        deadline = time.monotonic() + _DELETE_TIMEOUT
        delay = 0.5
        while True:
            try:
                state = await self.state(codespace)
            except NodeGoneError:
                return
            if state == "Deleted":
                return
            if time.monotonic() + delay > deadline:
                raise ProviderError(f"codespace {codespace} is still {state} after deleting it")
            await anyio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _until_available(self, codespace: str, deadline: float) -> None:
        delay = 0.5
        while True:
            state = await self.state(codespace)
            if state == "Available" or state in _STOPPED:  # a stopped one starts when reached
                return
            if state in _DEAD:
                raise ProvisionError(f"codespace {codespace} is {state}")
            if time.monotonic() + delay > deadline:
                raise ProvisionError(
                    f"codespace {codespace} is still {state} after {self.settings.ready_timeout:.0f}s"
                )
            await anyio.sleep(delay)
            delay = min(delay * 1.5, 10.0)

    # -- SSH ----------------------------------------------------------------------------

    async def has_stdio(self) -> bool:
        """Whether this gh has ``gh codespace ssh --stdio`` (asked once, without a server)."""
        if self._stdio is None:
            try:
                result = await anyio.run_process(
                    [self.settings.gh, "codespace", "ssh", "--stdio"], env=self._env, check=False
                )
            except OSError as error:
                raise ConfigError(f"cannot run gh ({self.settings.gh}): {error}") from None
            self._stdio = b"unknown flag" not in result.stderr
            if not self._stdio:
                logger.warning("this gh lacks `codespace ssh --stdio`: each process logs in on its own")
        return self._stdio

    async def ssh_to(self, codespace: str) -> SshNodes:
        """The SSH side of ``codespace``: one connection through ``gh codespace ssh
        --stdio``, or, with a gh without it, a ``gh codespace ssh -- COMMAND`` per process."""
        if codespace not in self._nodes:
            gh = (self.settings.gh, "codespace", "ssh", "-c", codespace)
            key = ("--", "-i", str(self._key))
            link: Link
            if await self.has_stdio():
                explain = functools.partial(gh_error, "codespace ssh", 1)
                link = Link(codespace, self._login, Tunnel((*gh, "--stdio", *key), self._env, explain))
            else:
                link = CommandLink(codespace, self._login, (*gh, *key), self._env)
            self._nodes[codespace] = SshNodes(self.name, link, self._login)
        return self._nodes[codespace]

    # -- the contract -------------------------------------------------------------------

    async def _provision(self, config: NodeConfig) -> NodeHandle:
        try:
            return await self._create(config)
        except (ProvisionError, ConfigError):
            raise
        except NodeprovError as error:
            raise ProvisionError(f"cannot provision node {config.node_id}: {error}") from None

    async def _create(self, config: NodeConfig) -> CodespaceNode:
        display = display_name(config)
        await _ensure_key(self._key)
        deadline = time.monotonic() + self.settings.ready_timeout
        mine = [c for c in await self.codespaces() if _node_id(c) == config.node_id]
        with suppress(NodeGoneError):
            return await self._adopt(config, await self.find(config.node_id), deadline)
        before = {str(c["name"]) for c in mine}
        answered: list[str] = []  # the codespace the create made; "" when GitHub refused it
        async with Rollback(timeout=_DELETE_TIMEOUT + _CREATE_SETTLE + 30) as rollback:
            # First: a codespace of this node that was not there before this provision is
            # its own (a create GitHub accepted before it was cut off): it goes.
            rollback.push(functools.partial(self._delete_new, config.node_id, before, answered))
            try:
                name = await self._launch(display, config.node_id)
            except (ConfigError, NodeGoneError):
                answered.append("")  # a 4xx or a refusal before any request: nothing was made
                raise
            answered.append(name)
            await self._until_available(name, deadline)
            ssh = await (await self.ssh_to(name)).create(config)
            return CodespaceNode(
                provider=self, node_id=config.node_id, codespace=name, state="Available", ssh=ssh
            )

    async def _delete_new(self, node_id: str, before: Collection[str], answered: list[str]) -> None:
        """Delete the codespaces of ``node_id`` that were not there before a provision. If its
        create had no answer (cut off in flight, a 5xx), GitHub may still make it (the request
        was on its way): look again for a while."""
        await self.delete(node_id, sparing=before)
        settled = time.monotonic() + _CREATE_SETTLE
        while not answered and time.monotonic() < settled:
            await anyio.sleep(1.0)
            await self.delete(node_id, sparing=before)

    async def _adopt(self, config: NodeConfig, codespace: dict[str, Any], deadline: float) -> CodespaceNode:
        """A live codespace of this node: adopted if an earlier attempt of this provision made
        it (a control plane that died after creating it), its node directory made or adopted
        likewise; anyone else's is left as it is."""
        name = str(codespace["name"])
        if not _made_by(codespace, config):
            raise ProvisionError(f"node {config.node_id} exists already (codespace {name})")
        logger.info(
            "node %s: adopting codespace %s, made by an earlier attempt of this provision",
            config.node_id,
            name,
        )
        await self._until_available(name, deadline)
        ssh = await (await self.ssh_to(name)).create(config)
        return CodespaceNode(
            provider=self, node_id=config.node_id, codespace=name, state="Available", ssh=ssh
        )

    async def _launch(self, display: str, node_id: str) -> str:
        settings = self.settings
        args = [
            "codespace",
            "create",
            f"--repo={settings.repo}",
            f"--machine={settings.machine}",
            f"--display-name={display}",
            f"--idle-timeout={settings.idle_timeout_minutes}m",
            f"--retention-period={settings.retention_period_minutes}m",
        ]
        for flag, value in (
            ("branch", settings.branch),
            ("devcontainer-path", settings.devcontainer_path),
            ("location", settings.location),
        ):
            if value:
                args.append(f"--{flag}={value}")
        try:
            out = await self.gh(*args, seconds=settings.ready_timeout + 30)
        except ProviderError as error:
            # gh waits two minutes for a codespace GitHub accepted (202); a slower one is
            # waited for here.
            if "deadline exceeded" not in str(error):
                raise
            return str((await self.find(node_id))["name"])
        return out.strip().splitlines()[-1]

    async def list_nodes(self) -> list[NodeInfo]:
        """Every codespace nodeprov made; the labels of a running one from its node record
        (over SSH), of a stopped one only its node id (reading more would start it)."""
        found: list[NodeInfo] = []
        limit = anyio.Semaphore(4)

        async def describe(codespace: dict[str, Any], node_id: str) -> None:
            labels: dict[str, str] = {LABEL_NODE_ID: node_id}
            if codespace["state"] == "Available":
                async with limit:
                    try:
                        with anyio.fail_after(60):
                            nodes = await self.ssh_to(codespace["name"])
                            labels = dict((await nodes.attach(node_id)).labels)
                    except (NodeprovError, TimeoutError) as error:
                        name = codespace["name"]
                        logger.warning("codespace %s: cannot read its node's record: %s", name, error)
            found.append(NodeInfo(node_id, self.name, labels, str(codespace["state"])))

        codespaces = await self.codespaces()  # outside the task group: its errors stay nodeprov's
        async with anyio.create_task_group() as tg:
            for codespace in codespaces:
                if node_id := _node_id(codespace):
                    tg.start_soon(describe, codespace, node_id)
        return found

    async def attach(self, node_id: str) -> NodeHandle:
        codespace = await self.find(node_id)
        node = CodespaceNode(
            provider=self, node_id=node_id, codespace=codespace["name"], state=str(codespace["state"])
        )
        if not node.suspended:
            await node._connected()  # its labels, workdir and environment
        return node

    async def probe(self) -> None:
        """Check the gh of the settings (there, new enough, with ``codespace ssh --stdio``
        or not: a warning says so), its login, and that it may list codespaces. (Which gh
        is used is a setting, so :meth:`requirements` cannot tell.)

        Raises:
            ConfigError: gh missing or too old, not logged in, or the token lacks the scope.
            ProviderError: GitHub could not be reached.
        """
        path = shutil.which(self.settings.gh, path=self._env.get("PATH"))
        if path is None:
            raise ConfigError(f"gh not found ({self.settings.gh}): install the GitHub CLI")
        version = await anyio.to_thread.run_sync(_version, path)
        if version is None or version < MIN_GH:
            shown = ".".join(map(str, version)) if version else "of unknown version"
            raise ConfigError(f"gh {shown} is too old: nodeprov needs {'.'.join(map(str, MIN_GH))} or later")
        await self.has_stdio()
        await self.gh("codespace", "list", "--limit", "1", "--json", "name")

    async def aclose(self) -> None:
        nodes, self._nodes = list(self._nodes.values()), {}
        for each in nodes:
            await each.link.aclose()


def _version(gh: str) -> tuple[int, ...] | None:
    """gh's version, from ``gh --version`` (which asks no server)."""
    try:
        out = subprocess.run(  # noqa: S603 - the operator's gh, one fixed argument
            [gh, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"gh version (\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(part) for part in found.groups()) if found else None
