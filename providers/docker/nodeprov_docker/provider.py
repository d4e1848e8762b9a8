from __future__ import annotations

import functools
import logging
import os
import posixpath
from collections.abc import Callable, Mapping
from contextlib import suppress
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

import anyio
import anyio.to_thread
import docker
import docker.errors
from docker.types import Mount

from nodeprov.errors import (
    ConfigError,
    NodeGoneError,
    NodeprovError,
    NodeSuspendedError,
    ProviderError,
    ProvisionError,
    SpawnError,
)
from nodeprov.exec import (
    DECODE_ARGUMENTS_SCRIPT,
    HOLDS_PIPE_SCRIPT,
    PREPARED_PREAMBLE,
    SENTINEL,
    SHELL_NAME,
    STDOUT,
    PreparedChannel,
    encode_arguments,
    prepared_request,
    read_report,
)
from nodeprov.node import (
    LABEL_NODE_ID,
    NodeConfig,
    NodeHandle,
    NodeInfo,
    NodeProvider,
    ProviderSettings,
    Requirement,
    Rollback,
)
from nodeprov.spawn import PreparedSpawn, SpawnedProcess, SpawnOptions, StopPolicy
from nodeprov_docker.engine import ConflictError, ask, engine, hijack
from nodeprov_docker.exec import DockerProcess, ExecOutput
from nodeprov_docker.settings import DockerSettings

__all__ = ["TOOLS_DIR", "DockerNode", "DockerProvider"]

logger = logging.getLogger("nodeprov.docker")

T = TypeVar("T")

_LOCAL_SOCKET = "unix:///var/run/docker.sock"  # the engine docker-py finds without DOCKER_HOST
TOOLS_DIR = "/opt/nodeprov/tools"
"""Where the executables of NodeConfig.tools are mounted, read-only, one per name."""
_READY = SENTINEL + b"ready "
# Decodes the arguments the engine could not carry (see encode_arguments), tells a missing
# command apart from a command that fails, reports as every preamble does (read_report: the
# exec's pid inside the container, where it leads its own process group, and what its stdout
# is; not its start time, "-", which _SIGNAL_GROUP does not check), then execs the command.
_PREAMBLE = (
    "__np_encoded=$1; shift\n"
    + DECODE_ARGUMENTS_SCRIPT
    + """command -v -- "$1" >/dev/null 2>&1 || { printf '\\036nodeprov notfound\\n'; exit 127; }
printf '\\036nodeprov ok %s - %s\\n' "$$" "$(readlink "/proc/$$/fd/1")"
"""
)
_SIGNAL_GROUP = 'kill -s "$1" -- "-$2" 2>/dev/null; exit 0'


class DockerNode(NodeHandle):
    """A node that is a container; see :mod:`nodeprov_docker`. It cannot be suspended: a
    paused container's main process, which sleeps out the node's lifetime, would freeze with
    it, and nothing on the engine would end the container at its lifetime (a kept node
    keeps running, idle, and ends on time)."""

    def __init__(
        self,
        *,
        provider: DockerProvider,
        container_id: str,
        labels: dict[str, str],
        workdir: str,
        container_env: dict[str, str],
        tool_paths: dict[str, str],
    ) -> None:
        settings = provider.settings
        super().__init__(
            node_id=labels[LABEL_NODE_ID],
            provider=DockerProvider.name,
            labels=labels,
            workdir=workdir,
            base_env={**container_env, **settings.env},
            tool_paths=tool_paths,
        )
        self.container_id = container_id
        self._exec_env = settings.env
        self._provider = provider
        self._stop_policy = StopPolicy(eof_grace=settings.eof_grace, term_grace=settings.term_grace)

    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        api = (await self._provider.client()).api
        argv = [*self._shell(options.env), "nodeprov", *encode_arguments([options.command, *options.args])]
        cwd = options.cwd or self.workdir
        # Shielded, and bounded instead: a cancellation after exec start would orphan it.
        # Per exec: the engine shows no exec's environment to anyone.
        environment = [f"{k}={v}" for k, v in {**self._exec_env, **options.env}.items()]
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(self._provider.settings.ready_timeout):
                    for attempt in range(_EXEC_ATTEMPTS):
                        exec_id = ""  # a timeout in this attempt's _exec is not the last attempt's exec
                        exec_id, output = await self._exec(api, argv, cwd, environment)
                        try:
                            pid, stdout_pipe = await self._handshake(output, options, exec_id)
                            break
                        except _ExecNeverRanError:
                            if attempt == _EXEC_ATTEMPTS - 1:
                                raise
                            logger.info("node %s: the engine did not run an exec; again", self.node_id)
                            await anyio.sleep(0.1 * 2**attempt)
            except TimeoutError:
                raise await self._start_timed_out(api, options, exec_id) from None
        return self._process(api, exec_id, output, pid, stdout_pipe)

    async def _start_timed_out(self, api: Any, options: SpawnOptions, exec_id: str) -> SpawnError:
        """The error of a spawn that did not start within ``ready_timeout``, saying where it
        stalled: the engine's answer to the exec, runc starting its process, or the process."""
        said = f"starting {options.command!r} on node {self.node_id} timed out after "
        said += f"{self._provider.settings.ready_timeout:g}s: "
        if not exec_id:
            return SpawnError(said + "the engine did not answer the exec's create and start")
        info: dict[str, Any] = {}
        with anyio.move_on_after(5), suppress(NodeprovError):
            info = await ask(api.exec_inspect, exec_id)
        if not info:
            return SpawnError(said + f"its exec {exec_id[:12]} started, and the engine no longer answers")
        if info["Running"]:
            return SpawnError(said + f"its shell (pid {info['Pid']}) said nothing")
        if not info["Pid"]:
            return SpawnError(said + f"the engine has not started its exec {exec_id[:12]}'s process (Pid 0)")
        return SpawnError(said + f"its shell ended saying nothing (exit code {info['ExitCode']})")

    async def _exec(
        self, api: Any, argv: list[str], cwd: str, environment: list[str] | None = None
    ) -> tuple[str, ExecOutput]:
        """Create and start an exec of ``argv`` with its standard streams attached."""
        exec_id: str = (
            await self._in_container(
                api.exec_create,
                self.container_id,
                argv,
                stdin=True,
                stdout=True,
                stderr=True,
                environment=environment,
                workdir=cwd,
                user=self._user,
            )
        )["Id"]
        return exec_id, ExecOutput(await hijack(api.exec_start, exec_id, socket=True))

    def _process(
        self, api: Any, exec_id: str, output: ExecOutput, pid: int, stdout_pipe: str
    ) -> DockerProcess:
        return DockerProcess(
            output,
            pid=pid,
            stop_policy=self._stop_policy,
            exit_code=functools.partial(self._exit_code, api, exec_id),
            signal_group=functools.partial(self._signal_group, api, pid),
            stdout_held=functools.partial(self._holds_pipe, api, stdout_pipe, pid) if stdout_pipe else None,
        )

    async def _prepare(self) -> PreparedSpawn:
        api = (await self._provider.client()).api
        argv = ["/bin/sh", "-c", PREPARED_PREAMBLE, "nodeprov"]
        with anyio.CancelScope(shield=True):  # bounded instead: a cancelled start would orphan the exec
            try:
                with anyio.fail_after(self._provider.settings.ready_timeout):
                    exec_id, output = await self._exec(api, argv, self.workdir)
            except TimeoutError:
                raise ProviderError(f"preparing a spawn on node {self.node_id} timed out") from None

        def request(options: SpawnOptions) -> bytes | None:
            # Names that are not shell names take the usual spawn: bash sets them there,
            # where the prepared preamble would need perl.
            env = {**self.base_env, **options.env}
            if not all(SHELL_NAME.match(name) for name in env):
                return None
            return prepared_request(options.cwd or self.workdir, "", options.argv, env, relay=False)

        async def started(options: SpawnOptions) -> SpawnedProcess:
            try:
                with anyio.fail_after(self._provider.settings.ready_timeout):
                    pid, stdout_pipe = await self._handshake(output, options)
            except TimeoutError:
                raise await self._start_timed_out(api, options, exec_id) from None
            return self._process(api, exec_id, output, pid, stdout_pipe)

        return PreparedChannel(output, output.send, request=request, started=started)

    def _shell(self, env: Mapping[str, str]) -> list[str]:
        """The preamble's shell: ``sh``, or ``bash`` when an environment name is not a shell
        name (``sh`` drops those when it execs; ``bash`` passes them on). Either adds
        variables of its own, removed unless asked for."""
        names = {*self.base_env, *env}
        bash = not all(SHELL_NAME.match(name) for name in names)
        script = _PREAMBLE + ("" if "PWD" in names else "unset PWD; ")
        script += 'exec env -u SHLVL -- "$@"' if bash and "SHLVL" not in names else 'exec "$@"'
        return ["bash" if bash else "/bin/sh", "-c", script]

    @property
    def _user(self) -> str:
        return self._provider.settings.user or ""

    async def _in_container(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """An engine call about this node's container: its absence is :class:`NodeGoneError`."""
        try:
            return await engine(call, *args, **kwargs)
        except NodeGoneError:
            raise NodeGoneError(f"node {self.node_id}: its container is gone") from None
        except ConflictError as error:
            if "paused" in str(error):
                raise NodeSuspendedError(
                    f"node {self.node_id}: its container was paused (not by nodeprov): unpause it first"
                ) from None
            raise NodeGoneError(f"node {self.node_id}: its container is not running") from None

    async def _handshake(
        self, output: ExecOutput, options: SpawnOptions, exec_id: str | None = None
    ) -> tuple[int, str]:
        """Read the preamble's report: (pid, stdout pipe); close the exec and raise (as
        :func:`~nodeprov.exec.read_report`) if the command could not be started. Given the
        ``exec_id`` of an exec of its own: :class:`_ExecNeverRanError` when the engine ended
        it saying nothing and its process never ran (runc failing under load): safe to try
        again, as no report means no command ran."""

        async def explain(said: str) -> str:
            if not said and exec_id is not None:
                info = await ask((await self._provider.client()).api.exec_inspect, exec_id)
                if not info["Running"] and not info["Pid"]:
                    raise _ExecNeverRanError(
                        f"cannot start {options.command!r} on node {self.node_id}: the engine ended "
                        f"its exec at once, its process never ran (exit code {info['ExitCode']}; "
                        "the engine's log says why)"
                    )
            return await _explain_engine(said)

        try:
            report = await read_report(output, options, f"node {self.node_id}", explain=explain)
        except BaseException:
            await output.aclose()
            raise
        return report.pid, report.pipe

    @staticmethod
    async def _exit_code(api: Any, exec_id: str) -> int | None:
        info = await ask(api.exec_inspect, exec_id)
        return None if info["Running"] else int(info["ExitCode"])

    async def _script(self, api: Any, argv: list[str]) -> str:
        """Start ``argv`` in the container, its output unread; its exec's id. Detached: an
        attached start's stream can outlive the processes a signal kills, and hang its thread."""
        exec_id: str = (await self._in_container(api.exec_create, self.container_id, argv, user=self._user))[
            "Id"
        ]
        await self._in_container(api.exec_start, exec_id, detach=True)
        return exec_id

    async def _holds_pipe(self, api: Any, pipe: str, pid: int) -> bool:
        exec_id = await self._script(api, ["/bin/sh", "-c", HOLDS_PIPE_SCRIPT, "nodeprov", pipe, str(pid)])
        while (code := await self._exit_code(api, exec_id)) is None:  # noqa: ASYNC110 - the engine has no exit event
            await anyio.sleep(0.01)
        return code != 1  # anything but a clear "no": held

    async def _signal_group(self, api: Any, pid: int, signal: str) -> None:
        with suppress(NodeGoneError):  # the container is gone, and every process with it
            await self._script(api, ["/bin/sh", "-c", _SIGNAL_GROUP, "nodeprov", signal, str(pid)])

    async def _destroy(self) -> None:
        await self._provider.remove_container(self.container_id)


class DockerProvider(NodeProvider[DockerSettings]):
    """Nodes as Docker containers; see :mod:`nodeprov_docker`."""

    name: ClassVar[str] = "docker"
    settings_model: ClassVar[type[ProviderSettings]] = DockerSettings

    def __init__(self, settings: DockerSettings) -> None:
        super().__init__(settings)
        self._client: docker.DockerClient | None = None
        self._client_lock = anyio.Lock()
        self._image_seen = False

    @classmethod
    def requirements(cls) -> list[Requirement]:
        # Only what can be seen without asking the engine (no command-line client is needed).
        if host := os.environ.get("DOCKER_HOST"):
            return [Requirement("Docker engine", True, f"DOCKER_HOST={host}")]
        socket = Path(_LOCAL_SOCKET.removeprefix("unix://"))
        found = socket.exists()
        return [
            Requirement(
                "Docker engine",
                found,
                str(socket) if found else "no socket: start dockerd or set DOCKER_HOST",
            )
        ]

    def unreachable_loopback(self) -> str | None:
        """Only a container on the host's network, of an engine on this machine, reaches its 127.0.0.1."""
        host = self.settings.docker_host or os.environ.get("DOCKER_HOST") or _LOCAL_SOCKET
        if not host.startswith("unix://"):
            return f"the docker provider's engine ({host}) is another machine's, whose nodes do not reach it"
        if self.settings.network_mode != "host":
            return (
                f"the docker provider's nodes (network {self.settings.network_mode or 'default'}) do not "
                "reach it: give the setting network_mode=host (-s network_mode=host)"
            )
        return None

    def resolved_settings(self) -> DockerSettings:
        """The engine made explicit: ``docker_host``, else ``DOCKER_HOST``, else the local socket."""
        host = self.settings.docker_host or os.environ.get("DOCKER_HOST") or _LOCAL_SOCKET
        return self.settings.model_copy(update={"docker_host": host})

    async def client(self) -> docker.DockerClient:
        """The engine client, made on first use (it asks the engine for its API version)."""
        async with self._client_lock:
            if self._client is None:
                host = self.settings.docker_host
                if host is not None and not host.startswith(("unix://", "tcp://", "http://")):
                    raise ConfigError(f"docker_host {host!r}: only unix:// and tcp:// engines are supported")
                make = functools.partial(docker.DockerClient, base_url=host) if host else docker.from_env
                # It asks the engine for its API version: abandoned, not waited for, when its
                # caller gives up (an engine that hangs would hold a probe for a minute).
                client = await ask(make)
                if client.api.base_url.startswith("https"):
                    raise ConfigError("TLS Docker engines are not supported (the exec socket is used raw)")
                self._client = client
            return self._client

    async def _provision(self, config: NodeConfig) -> NodeHandle:
        settings = self.settings
        if not settings.image:
            raise ConfigError("the docker provider needs an image (setting 'image')")
        client = await self.client()
        name = f"nodeprov-{config.node_id}"
        labels = config.resource_labels()
        async with Rollback() as rollback:
            await self._ensure_image(client, settings.image)
            # By name, before creating: a cancellation during create must not orphan it. Only
            # a container this provision made is removed, never another's of that name.
            rollback.push(functools.partial(self._remove_own, name, config))
            try:
                container = await self._create(client, config, name, labels)
            except ConflictError:
                return await self._adopt(config, name)
            try:
                # Attached before start, as `docker run` does: output is never missed.
                socket = await hijack(
                    client.api.attach_socket, container["Id"], params={"stdout": 1, "stderr": 1, "stream": 1}
                )
                try:
                    await engine(client.api.start, container["Id"])
                    home = await self._ready(ExecOutput(socket), config.node_id)
                finally:
                    await socket.aclose()
                inspected = await ask(client.api.inspect_container, container["Id"])
            except ProvisionError:
                raise
            except NodeprovError as error:
                raise ProvisionError(f"cannot start node {config.node_id}: {error}") from None
            node = DockerNode(
                provider=self,
                container_id=container["Id"],
                labels=labels,
                workdir=config.workdir or settings.workdir,
                container_env=_exec_env(inspected, home),
                tool_paths={name: f"{TOOLS_DIR}/{name}" for name in config.tools},
            )
        return node

    async def _create(
        self, client: docker.DockerClient, config: NodeConfig, name: str, labels: dict[str, str]
    ) -> dict[str, Any]:
        """Create the node's container (not started).

        Raises:
            ConflictError: a container of that name exists.
        """
        settings = self.settings
        try:
            created: dict[str, Any] = await engine(
                client.api.create_container,
                settings.image,
                command=_keep_alive(config.ttl),
                name=name,
                labels=labels,
                environment=config.env,
                user=settings.user,
                working_dir=config.workdir or settings.workdir,
                detach=True,
                host_config=client.api.create_host_config(
                    init=True,
                    auto_remove=True,
                    network_mode=settings.network_mode,
                    nano_cpus=int(settings.cpus * 1e9) if settings.cpus else None,
                    mem_limit=settings.memory,
                    mounts=self._mounts(config.tools),
                ),
            )
        except ConflictError:
            raise
        except NodeprovError as error:
            raise ProvisionError(f"cannot create node {config.node_id}: {error}") from None
        return created

    async def _adopt(self, config: NodeConfig, name: str) -> NodeHandle:
        """The container of that name, if an earlier attempt of this provision made it and it
        runs; anyone else's is left as it is."""
        api = (await self.client()).api
        try:
            found = await ask(api.inspect_container, name)
        except NodeGoneError:  # removed meanwhile: the name is free again
            return await self._provision(config)
        if not config.made_by_this(found["Config"]["Labels"] or {}):
            raise ProvisionError(f"node {config.node_id} exists already (container {name})")
        if not found["State"]["Running"]:  # ours, cut off before it started: made again
            await self.remove_container(name)
            return await self._provision(config)
        logger.info("adopting node %s, made by an earlier attempt of this provision", config.node_id)
        return await self.attach(config.node_id)

    async def _remove_own(self, name: str, config: NodeConfig) -> None:
        """Remove the container of that name if this provision made it."""
        try:
            found = await ask((await self.client()).api.inspect_container, name)
        except NodeGoneError:
            return
        if config.made_by_this(found["Config"]["Labels"] or {}):
            await self.remove_container(name)

    async def _ensure_image(self, client: docker.DockerClient, image: str) -> None:
        pull = self.settings.pull
        if pull != "always":
            if self._image_seen:
                return
            try:
                await ask(client.api.inspect_image, image)
            except NodeGoneError:
                if pull == "never":
                    raise ProvisionError(f"image {image!r} is not on the engine (pull='never')") from None
            else:
                self._image_seen = True
                return
        try:
            await engine(client.images.pull, image)
        except NodeprovError as error:
            raise ProvisionError(f"image {image!r} could not be pulled: {error}") from None
        self._image_seen = True

    def _mounts(self, tools: Mapping[str, str]) -> list[Mount]:
        """The settings' mounts, and each tool bind-mounted read-only (the engine must run on
        this machine to see it)."""
        mounts = [Mount(m.target, m.source, type=m.type, read_only=m.read_only) for m in self.settings.mounts]
        for name, path in tools.items():
            if not os.path.isfile(path):
                raise ConfigError(f"tool {name!r}: {path} is not a file on this machine")
            mounts.append(Mount(f"{TOOLS_DIR}/{name}", path, type="bind", read_only=True))
        return mounts

    async def _ready(self, output: ExecOutput, node_id: str) -> str:
        """Wait for the keep-alive's report (see :func:`_keep_alive`) on the container's
        output, attached before start so none of it is missed; return the user's home."""
        said = b""
        try:
            with anyio.fail_after(self.settings.ready_timeout):
                while _parse_report(said) is None:
                    said += await output.receive(STDOUT, 65536)
        except TimeoutError:
            raise ProvisionError(f"node {node_id} was not ready in {self.settings.ready_timeout}s") from None
        except anyio.EndOfStream:
            raise ProvisionError(
                f"node {node_id} died while starting: {said[-500:].decode(errors='replace')}"
            ) from None
        return cast(str, _parse_report(said))

    async def remove_container(self, container: str) -> None:
        """Remove a container with force; fine if it is gone or already being removed."""
        api = (await self.client()).api
        try:
            await ask(api.remove_container, container, force=True)
        except NodeGoneError:
            return
        except ConflictError:
            pass  # already being removed
        # Removal was already under way (auto_remove): wait until it is done.
        while True:
            try:
                await ask(api.inspect_container, container)
            except NodeGoneError:
                return
            await anyio.sleep(0.05)

    async def list_nodes(self) -> list[NodeInfo]:
        api = (await self.client()).api
        containers = await ask(api.containers, all=True, filters={"label": LABEL_NODE_ID})
        return [NodeInfo(c["Labels"][LABEL_NODE_ID], self.name, c["Labels"], c["State"]) for c in containers]

    async def attach(self, node_id: str) -> NodeHandle:
        api = (await self.client()).api
        found = await ask(api.containers, all=True, filters={"label": f"{LABEL_NODE_ID}={node_id}"})
        if not found:
            raise NodeGoneError(f"no docker node {node_id}")
        container = await ask(api.inspect_container, found[0]["Id"])
        labels, workdir = container["Config"]["Labels"], container["Config"]["WorkingDir"] or "/"
        home = ""
        if container["State"]["Running"]:
            logs = await ask(api.logs, container["Id"], stdout=True, stderr=False, stream=False)
            home = _parse_report(cast(bytes, logs)) or ""
        node = DockerNode(
            provider=self,
            container_id=container["Id"],
            labels=labels,
            workdir=workdir,
            container_env=_exec_env(container, home),
            tool_paths={
                posixpath.basename(m["Destination"]): m["Destination"]
                for m in container.get("Mounts") or ()
                if posixpath.dirname(m["Destination"]) == TOOLS_DIR
            },
        )
        return node

    async def probe(self) -> None:
        await ask((await self.client()).ping)


_EXEC_ATTEMPTS = 3
"""Execs of one spawn the engine may end before their process runs (runc's "error executing
setns process" on a loaded host), each tried again after 0.1 s, then 0.2 s."""


class _ExecNeverRanError(SpawnError):
    """The engine ended an exec at once, saying nothing; its process never ran."""


async def _explain_engine(said: str) -> str:
    """What the engine said when it could not start even the shell (a missing cwd, no
    /bin/sh), with a hint where the missing program is bash."""
    if "bash" in said and "executable file not found" in said:
        said += " (environment names that are not shell names need bash on the node)"
    return said


def _exec_env(inspected: dict[str, Any], home: str) -> dict[str, str]:
    """The environment the engine gives every exec of a container, before the exec's own."""
    config = inspected["Config"]
    env = {"HOSTNAME": config["Hostname"], "HOME": home}
    return env | dict(item.split("=", 1) for item in config["Env"] or [] if "=" in item)


def _parse_report(said: bytes) -> str | None:
    """The home directory in the keep-alive's report, or None before the report is whole."""
    if (start := said.find(_READY)) < 0 or (end := said.find(b"\n", start)) < 0:
        return None
    return said[start + len(_READY) : end].decode(errors="surrogateescape")


def _keep_alive(ttl: timedelta | None) -> list[str]:
    """The container's main process: report readiness and the user's home (what the engine
    gives every exec as HOME), then sleep out the node's lifetime. When it ends the container
    does, and the engine removes it. It prints nothing else: a log driver may ship the log."""
    script = 'printf "\\036nodeprov ready %s\\n" "$HOME"; exec sleep "$1"'
    return [
        "/bin/sh",
        "-c",
        script,
        "nodeprov",
        "infinity" if ttl is None else str(max(1, int(ttl.total_seconds()))),
    ]
