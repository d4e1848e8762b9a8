"""A node that is a pod: :class:`KubernetesNode`, whose processes run through the pod's
exec (see :mod:`nodeprov_kubernetes.exec`) under the exec kit's preamble
(:mod:`nodeprov.exec.preamble`)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from contextlib import suppress
from typing import Any, ClassVar, Protocol

import anyio

from nodeprov.errors import NodeGoneError, NodeprovError, ProviderError, SpawnError
from nodeprov.exec import (
    END_RELAY,
    HOLDS_PIPE_SCRIPT,
    PREAMBLE,
    PREPARED_PREAMBLE,
    RELAYED_PREAMBLE,
    SIGNAL_GROUP,
    STDOUT,
    PreparedChannel,
    Report,
    encode_arguments,
    environment_block,
    prepared_request,
    read_report,
)
from nodeprov.node import LABEL_NODE_ID, NodeHandle
from nodeprov.spawn import PreparedSpawn, SpawnedProcess, SpawnOptions, StopPolicy
from nodeprov_kubernetes.api import Api, UnreachableError
from nodeprov_kubernetes.exec import V5, ExecChannel, PodProcess, exit_status
from nodeprov_kubernetes.settings import KubernetesSettings

__all__ = ["SCRIPT_TIMEOUT", "KubernetesNode", "Pods", "copy_tool"]

SCRIPT_TIMEOUT = 30.0
"""Seconds a short script in a pod (a signal, a check, reading the environment) may take."""
_SAYING_TIME = 2.0  # seconds to wait for the status of an exec that could not start
_KILL_TIMEOUT = 10.0
# Every process this user may signal in the pod's (shared) PID namespace, but PID 1 (pause)
# and the shell itself, which kill(2) spares.
_KILL_ALL = "kill -s KILL -- -1 2>/dev/null; exit 0"
_COPY_CHUNK = 1024 * 1024


class Pods(Protocol):
    """What a pod's node needs of its provider (:class:`~nodeprov_kubernetes.KubernetesProvider`)."""

    name: ClassVar[str]
    settings: KubernetesSettings
    api: Api
    exec_protocol: str
    """The exec protocol the API server last agreed to (empty until the first exec)."""

    async def read_pod(self, name: str) -> Any:
        """The pod ``name``; :class:`~nodeprov.errors.NodeGoneError` when there is none."""

    async def delete_pod(self, name: str, uid: str | None, *, ended: bool = False) -> None:
        """Delete the pod (while it has ``uid``) and return once it is gone."""


class KubernetesNode(NodeHandle):
    """A node that is a pod; see :mod:`nodeprov_kubernetes`."""

    def __init__(
        self,
        *,
        provider: Pods,
        pod: str,
        uid: str,
        labels: Mapping[str, str],
        workdir: str,
        pod_env: Mapping[str, str],
        tool_paths: Mapping[str, str],
    ) -> None:
        settings = provider.settings
        super().__init__(
            node_id=labels[LABEL_NODE_ID],
            provider=provider.name,
            labels=labels,
            workdir=workdir,
            base_env={**pod_env, **settings.env},
            tool_paths=tool_paths,
        )
        self.pod = pod
        self.uid = uid
        self.namespace = settings.namespace
        self._provider = provider
        self._stop_policy = StopPolicy(eof_grace=settings.eof_grace, term_grace=settings.term_grace)

    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        # Until the API server has shown it speaks v5, stdin goes through the relay (see
        # nodeprov.exec.preamble); under v5 the relay ends with stdin all the same.
        relayed = self._provider.exec_protocol != V5
        argv = [
            "/bin/sh",
            "-c",
            RELAYED_PREAMBLE if relayed else PREAMBLE,
            "nodeprov",
            options.cwd or self.workdir,
            "",
            *encode_arguments(options.argv),
        ]
        # Shielded, and bounded instead: a cancellation after the exec started would
        # orphan the process. The core kills what a cancelled spawn returns.
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(self._provider.settings.spawn_timeout):
                    channel = await self._exec(argv)
                    self._provider.exec_protocol = channel.protocol
                    try:
                        await channel.send(environment_block({**self.base_env, **options.env}), counted=False)
                        report = await self._handshake(channel, options)
                    except BaseException:
                        await channel.aclose()
                        raise
            except TimeoutError:
                raise SpawnError(f"starting {options.command!r} on node {self.node_id} timed out") from None
            except anyio.BrokenResourceError:
                raise await self._gone_or_lost(None) or NodeGoneError(
                    f"node {self.node_id}: the exec connection was lost"
                ) from None
        return self._process(channel, report)

    async def _prepare(self) -> PreparedSpawn:
        with anyio.CancelScope(shield=True):  # bounded instead: a cancelled start would orphan the exec
            try:
                with anyio.fail_after(self._provider.settings.spawn_timeout):
                    channel = await self._exec(["/bin/sh", "-c", PREPARED_PREAMBLE, "nodeprov"])
            except TimeoutError:
                raise ProviderError(f"preparing a spawn on node {self.node_id} timed out") from None
        self._provider.exec_protocol = channel.protocol

        def request(options: SpawnOptions) -> bytes | None:
            env = {**self.base_env, **options.env}
            cwd = options.cwd or self.workdir
            return prepared_request(cwd, "", options.argv, env, relay=channel.protocol != V5)

        async def started(options: SpawnOptions) -> SpawnedProcess:
            try:
                with anyio.fail_after(self._provider.settings.spawn_timeout):
                    report = await self._handshake(channel, options)
            except TimeoutError:
                raise SpawnError(f"starting {options.command!r} on node {self.node_id} timed out") from None
            return self._process(channel, report)

        send = functools.partial(channel.send, counted=False)  # the request is not the process's stdin
        return PreparedChannel(channel, send, request=request, started=started)

    def _process(self, channel: ExecChannel, report: Report) -> PodProcess:
        return PodProcess(
            channel,
            pid=report.pid,
            signal_group=functools.partial(self._signal_group, report.pid, report.start),
            lost=self._gone_or_lost,
            stop_policy=self._stop_policy,
            end_relay=functools.partial(self._end_relay, report.relay, report.relay_start)
            if report.relay
            else None,
            stdout_held=functools.partial(self._holds_pipe, report.pipe, report.pid) if report.pipe else None,
        )

    async def _exec(self, argv: list[str]) -> ExecChannel:
        try:
            return await self._provider.api.exec(self.pod, self.namespace, argv)
        except NodeGoneError:
            raise NodeGoneError(f"node {self.node_id}: its pod is gone or not running") from None
        except UnreachableError:
            # The kubelet answers an exec into a pod it is deleting HTTP 500: ask the pod.
            gone = await self._pod_gone_if_known()
            if gone is not None:
                raise gone from None
            raise

    async def _pod_gone_if_known(self) -> NodeGoneError | None:
        try:
            return await self._pod_gone()
        except NodeprovError:
            return None

    async def _handshake(self, channel: ExecChannel, options: SpawnOptions) -> Report:
        """Read the preamble's report; raise (as :func:`~nodeprov.exec.read_report`) if the
        command could not be started, :class:`NodeGoneError` if that is because the pod is
        gone or ending."""

        async def explain(said: str) -> str:
            # Not even the preamble ran (no /bin/sh in the image): what the exec said, unless
            # the pod is going.
            with anyio.move_on_after(_SAYING_TIME):
                await channel.exited()
            gone: NodeGoneError | None = None
            if channel.status is None:
                gone = await self._gone_or_lost(None)
            else:
                with suppress(NodeprovError):
                    gone = await self._pod_gone()
            if gone is not None:
                raise gone
            return said or str((channel.status or {}).get("message") or "")

        return await read_report(channel, options, f"node {self.node_id}", explain=explain)

    async def _gone_or_lost(self, code: int | None) -> NodeGoneError | None:
        """Why a process's exec ended as it did (``code``: its exit status, None if no status
        came): the pod is gone or ending, or (no status) the connection was lost; None when
        the exit status stands."""
        try:
            gone = await self._pod_gone()
        except NodeprovError as error:
            if code is not None:
                return None
            return NodeGoneError(f"node {self.node_id}: the exec connection was lost ({error})")
        if gone is None and code is None:
            return NodeGoneError(f"node {self.node_id}: the exec connection to the API server was lost")
        return gone

    async def _pod_gone(self) -> NodeGoneError | None:
        """Why this node's pod is gone or ending (deleted, finished), or None if it runs.

        Raises:
            ProviderError: the API server could not be asked.
        """
        try:
            pod = await self._provider.read_pod(self.pod)
        except NodeGoneError:
            return NodeGoneError(f"node {self.node_id}: its pod is gone")
        if pod.metadata.uid != self.uid:
            return NodeGoneError(f"node {self.node_id}: its pod is gone")
        if pod.metadata.deletion_timestamp is not None or pod.status.phase in ("Failed", "Succeeded"):
            ending = "being deleted" if pod.metadata.deletion_timestamp else pod.status.phase
            return NodeGoneError(f"node {self.node_id}: its pod has ended ({pod.status.reason or ending})")
        return None

    async def _script(self, script: str, *args: str, seconds: float = SCRIPT_TIMEOUT) -> tuple[int, bytes]:
        """Run the POSIX sh ``script`` in the pod; (exit status, stdout).

        Raises:
            NodeGoneError: the pod is gone, or the connection was lost.
            ProviderError: no answer in time, or the API server failed.
        """
        try:
            with anyio.fail_after(seconds):
                channel = await self._exec(["/bin/sh", "-c", script, "nodeprov", *args])
                try:
                    out = await channel.collect(STDOUT)
                    await channel.exited()
                finally:
                    await channel.aclose()
        except TimeoutError:
            raise ProviderError(f"node {self.node_id}: no answer from its pod in {SCRIPT_TIMEOUT}s") from None
        code = None if channel.status is None else exit_status(channel.status)
        if code is None:
            raise NodeGoneError(f"node {self.node_id}: the exec ended without an exit status")
        return code, out

    async def _signal_group(self, pid: int, start: str, signal: str) -> None:
        try:
            await self._script(SIGNAL_GROUP, signal, str(pid), start)
        except NodeGoneError:
            pass  # the pod is gone, and every process with it
        except ProviderError as error:
            raise SpawnError(f"node {self.node_id}: could not signal process {pid}: {error}") from None

    async def _holds_pipe(self, pipe: str, pid: int) -> bool:
        code, _ = await self._script(HOLDS_PIPE_SCRIPT, pipe, str(pid))
        return code != 1  # anything but a clear "no": held

    async def _end_relay(self, relay: str, start: str, sent: int) -> None:
        """End the stdin relay once it has passed on ``sent`` bytes (v4: see the module).
        The ending runs on in the pod; this waits only until it has begun."""
        try:
            channel = await self._exec(["/bin/sh", "-c", END_RELAY, "nodeprov", relay, start, str(sent)])
        except NodeprovError:
            return  # the pod or the connection is gone: so is the process's stdin
        try:
            with anyio.move_on_after(SCRIPT_TIMEOUT):
                await channel.receive(STDOUT, 64)
        except anyio.EndOfStream:
            pass
        finally:
            await channel.aclose()

    async def _destroy(self) -> None:
        # Every process of the pod (but its pause process, PID 1) ended by one exec, then the
        # object removed outright; where that exec cannot run, the graceful way.
        try:
            code, _ = await self._script(_KILL_ALL, seconds=_KILL_TIMEOUT)
        except NodeprovError:
            code = None
        await self._provider.delete_pod(self.pod, self.uid, ended=code == 0)


async def copy_tool(node: KubernetesNode, target: str, path: str) -> None:
    """Copy the executable ``path`` of this machine to ``target`` in the pod, streamed.

    Raises:
        NodeFileError, NodeGoneError: as :meth:`NodeHandle.write_file`.
    """

    async def chunks() -> AsyncIterator[bytes]:
        async with await anyio.open_file(path, "rb") as file:
            while chunk := await file.read(_COPY_CHUNK):
                yield chunk

    await node.write_file(target, chunks(), mode=0o755)
