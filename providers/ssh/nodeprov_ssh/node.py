"""A node that is a directory on a host reached over SSH: :class:`SshNode`, and the remote
scripts that make, list, signal and remove nodes. Shared by every provider whose nodes are
reached over SSH (an SSH host, an EC2 instance)."""

from __future__ import annotations

import functools
import hashlib
import logging
import posixpath
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from datetime import timedelta
from typing import cast

import anyio
import anyio.to_thread
import asyncssh
from pydantic import BaseModel, Field

from nodeprov.errors import (
    ConfigError,
    NodeFileError,
    NodeFileNotFoundError,
    NodeGoneError,
    NodeprovError,
    ProviderError,
    SpawnError,
)
from nodeprov.exec import (
    HOLDS_PIPE_SCRIPT,
    SIGNAL_GROUP,
    SIGNAL_GROUP_FUNCTION,
    START_TIME_FUNCTION,
    STDERR,
    STDOUT,
    Report,
    environment_block,
    read_report,
)
from nodeprov.node import NodeHandle
from nodeprov.spawn import SpawnedProcess, SpawnOptions, StopPolicy
from nodeprov_ssh.link import Link
from nodeprov_ssh.process import Session, SshProcess
from nodeprov_ssh.remote import command_line, script_line

__all__ = [
    "CREATE",
    "DEFAULT_PATH",
    "DESTROY",
    "DESTROY_OWN",
    "LIST",
    "NODE_MARKER",
    "PREPARE_ROOT",
    "PROCESSES_FILE",
    "READ_RECORD",
    "RECORD",
    "RECORD_FILE",
    "TOOLS_DIR",
    "UPLOAD",
    "NodeRecord",
    "SshNode",
    "run_script",
    "said",
    "ttl_seconds",
    "upload_tool",
]

logger = logging.getLogger("nodeprov.ssh")

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RECORD_FILE = "node.json"
PROCESSES_FILE = "processes"
TOOLS_DIR = ".tools"
_SCRIPT_TIMEOUT = 60.0
_GIVE_UP = 15.0  # for a timed-out spawn to say whether it started, and be ended if it did
_CHUNK = 256 * 1024
_EXCLUSIVE = asyncssh.FXF_WRITE | asyncssh.FXF_CREAT | asyncssh.FXF_EXCL

# $1: the node directory; $2: a pid to spare (the watchdog running this). Ends every
# process group the node recorded, then every process that carries the node's marker in
# its environment (what left its group or session: a daemon, an agent's detached tool),
# then removes the directory (a workdir of the user's lies elsewhere and stays). It ends
# once what it killed is gone (a killed process on a busy host takes a while to exit), or
# after about 5 s for a process the kernel cannot kill (uninterruptible sleep).
DESTROY = (
    SIGNAL_GROUP_FUNCTION
    + """\
pause() { sleep 0.1 2>/dev/null || sleep 1; }
until_gone() {
  waited=0
  while [ "$waited" -lt 50 ]; do
    now=$(__np_start_of "$1")
    [ -n "$now" ] || return 0
    [ "$2" = - ] || [ "$now" = "$2" ] || return 0
    grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null && return 0  # a zombie
    pause; waited=$((waited + 1))
  done
}
[ -d "$1" ] || exit 0
if [ -f "$1/processes" ]; then
  while read -r pid start; do
    [ "$pid" = "$2" ] || signal_group KILL "$pid" "$start"
  done <"$1/processes"
fi
round=0
while [ "$round" -lt 50 ]; do  # until no marked process is left to kill
  killed=0
  for file in $(grep -lzxF -e "NODEPROV_NODE=$1" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${file#/proc/}; pid=${pid%/environ}
    [ "$pid" = "$2" ] || [ "$pid" = "$$" ] || ! kill -s KILL "$pid" 2>/dev/null || killed=1
  done
  [ "$killed" = 1 ] || break
  pause; round=$((round + 1))
done
if [ -f "$1/processes" ]; then
  while read -r pid start; do
    case $pid in "$2"|*[!0-9]*|'') ;; *) until_gone "$pid" "$start" ;; esac
  done <"$1/processes"
fi
rm -rf -- "$1"
"""
)
NODE_MARKER = "NODEPROV_NODE"
"""In the environment of every process of an SSH node: the node's directory. Destroy ends
every process that carries it, wherever it moved (a process group or session of its own)."""

# $1: the node directory; $2: a provision's mark; $3: DESTROY. The node is destroyed only if
# that provision made it: a rollback never touches another's node of the same id.
DESTROY_OWN = """\
[ -f "$1/provision" ] && [ "$(cat -- "$1/provision")" = "$2" ] || exit 0
exec /bin/sh -c "$3" nodeprov-destroy "$1" 0
"""

# $1: the provider's root (relative to the login's home). Made 0700 if missing; refused
# unless it is a directory of this user's that nobody else can write to. Prints it, absolute.
PREPARE_ROOT = """\
[ -e "$1" ] || mkdir -p -m 700 -- "$1" || exit 1
[ -L "$1" ] && { echo "$1 is a symbolic link" >&2; exit 3; }
cd -- "$1" || exit 1
[ -O . ] || { echo "$1 is not owned by $(id -un)" >&2; exit 3; }
case $(ls -ld .) in ?????w*|????????w*) echo "$1 is writable by group or others" >&2; exit 3 ;; esac
pwd -P
"""

# $1: the node directory; $2: the workdir asked for (empty: the node's own); $3: the
# provision's mark, kept in the directory at once. Prints the workdir. Exits 3 when the
# directory exists, 5 when it exists and this provision made it (an earlier attempt of it).
CREATE = """\
umask 077
if ! mkdir -- "$1" 2>/dev/null; then
  [ -d "$1" ] || { echo "cannot make $1" >&2; exit 1; }
  [ -f "$1/provision" ] && [ "$(cat -- "$1/provision")" = "$3" ] && exit 5
  exit 3
fi
printf '%s\\n' "$3" >"$1/provision" || exit 1
mkdir -- "$1/home" "$1/tmp" || exit 1
if [ -z "$2" ]; then
  mkdir -- "$1/work" && printf '%s\\n' "$1/work"
else
  cd -- "$2" 2>/dev/null && [ -d . ] || { echo "workdir $2 is not a directory" >&2; exit 4; }
  pwd -P
fi
"""

# $1: the node directory; $2: seconds the node may live (empty: for ever); $3: DESTROY;
# $4: the record's size in bytes. Stdin: the node's record. The watchdog destroys the node
# when its lifetime is over, even if no control plane is left to do it; it is the first
# process the node records.
RECORD = (
    START_TIME_FUNCTION
    + """\
umask 077
[ -d "$1" ] || exit 3
# Only a whole record is kept: a control plane killed while sending it closes stdin early.
cat >"$1/node.json.partial" && [ "$(wc -c <"$1/node.json.partial")" -eq "$4" ] &&
  mv -f -- "$1/node.json.partial" "$1/node.json" || { rm -f -- "$1/node.json.partial"; exit 1; }
[ -n "$2" ] || exit 0
watch='sleep "$2" && exec /bin/sh -c "$3" nodeprov-destroy "$1" "$$"'
if command -v setsid >/dev/null 2>&1; then
  setsid /bin/sh -c "$watch" nodeprov-watchdog "$@" </dev/null >/dev/null 2>&1 &
else
  /bin/sh -c "$watch" nodeprov-watchdog "$@" </dev/null >/dev/null 2>&1 &
fi
start=$(__np_start_of $!)
printf '%s %s\\n' "$!" "${start:--}" >>"$1/processes"
"""
)

# $1: the root. Prints "NAME<TAB>RECORD" for each node directory with a record.
LIST = """\
for record in "$1"/*/node.json; do
  [ -f "$record" ] || continue
  dir=${record%/node.json}
  printf '%s\\t' "${dir##*/}"
  cat -- "$record" && echo
done
exit 0
"""

READ_RECORD = """[ -f "$1/node.json" ] || exit 3; exec cat -- "$1/node.json" """

# $1: where the tool goes; $2: its size in bytes (a copy cut short is not kept). Stdin: the bytes.
UPLOAD = """\
umask 022
mkdir -p -- "${1%/*}" && cat >"$1.$$" && [ "$(wc -c <"$1.$$")" -eq "$2" ] && chmod 755 "$1.$$" &&
  mv -f -- "$1.$$" "$1" || { rm -f -- "$1.$$"; exit 1; }
"""


class NodeRecord(BaseModel):
    """What ``node.json`` keeps on the host, so another control plane can attach to the node."""

    node_id: str
    labels: dict[str, str]
    workdir: str
    env: dict[str, str] = Field(default_factory=dict)
    tools: dict[str, str] = Field(default_factory=dict)


async def run_script(
    link: Link,
    script: str,
    *args: str,
    stdin: bytes = b"",
    seconds: float = _SCRIPT_TIMEOUT,
    makes: bool = False,
) -> tuple[int, bytes, bytes]:
    """Run the POSIX sh ``script`` with ``args`` on the host; (exit status, stdout, stderr).

    A script that ``makes`` something is shielded from cancellation (bounded by ``seconds``
    instead): cut short here, it would go on on the host and finish after the rollback
    that was to undo it.

    Raises:
        NodeGoneError: the connection dropped meanwhile.
        ProviderError: the host did not answer in ``seconds``, or failed.
        ConfigError: as :meth:`Link.open`.
    """
    try:
        with anyio.fail_after(seconds, shield=makes):
            session = await link.open(script_line(script, *args))
            try:
                with suppress(anyio.BrokenResourceError):  # it ended first: its status says how
                    await session.send(stdin)
                    session.write_eof()
                out, error = await session.collect(STDOUT), await session.collect(STDERR)
                await session.exited()
            finally:
                session.close()
    except TimeoutError:
        raise ProviderError(f"{link.host}: no answer in {seconds}s") from None
    except anyio.BrokenResourceError:
        raise NodeGoneError(f"{link.host}: the SSH connection was lost") from None
    if session.exit_status is None:
        raise NodeGoneError(f"{link.host}: the SSH connection was lost")
    return session.exit_status, out, error


def said(code: int, stderr: bytes) -> str:
    return stderr.decode(errors="replace").strip()[-500:] or f"exit status {code}"


class SshNode(NodeHandle):
    """A node that is a directory on an SSH host; see :mod:`nodeprov_ssh`.

    Its processes run as the login user, each in a process group of its own, recorded in
    the node's directory; destroy ends each group and removes the directory.
    """

    def __init__(
        self,
        *,
        provider: str,
        link: Link,
        record: NodeRecord,
        directory: str,
        path: str,
        env: Mapping[str, str],
        stop_policy: StopPolicy,
        spawn_timeout: float,
    ) -> None:
        super().__init__(
            node_id=record.node_id,
            provider=provider,
            labels=record.labels,
            workdir=record.workdir,
            # A temporary directory of its own, gone with the node: the host's /tmp outlives it.
            base_env={
                "PATH": path,
                "HOME": f"{directory}/home",
                "TMPDIR": posixpath.join(directory, "tmp"),
                **record.env,
                **env,
                NODE_MARKER: directory,
            },
            tool_paths=record.tools,
            file_roots=(directory, record.workdir),
        )
        self.directory = directory
        self.link = link
        self._stop_policy = stop_policy
        self._spawn_timeout = spawn_timeout

    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        command = command_line(
            options.argv, options.cwd or self.workdir, f"{self.directory}/{PROCESSES_FILE}"
        )
        environment = environment_block({**self.base_env, **options.env})
        # Shielded, and bounded instead: a cancellation after the session opened would
        # orphan the process. The core kills what a cancelled spawn returns.
        with anyio.CancelScope(shield=True):
            # Opened whole (bounded by the link's own timeouts): a session cut off while it
            # opens would be left open, out of reach.
            session = await self.link.open(command)
            try:
                with anyio.fail_after(self._spawn_timeout):
                    await session.send(environment)
                    report = await self._handshake(session, options)
            except TimeoutError:
                await self._give_up(session, options)
                raise SpawnError(f"starting {options.command!r} on node {self.node_id} timed out") from None
            except anyio.BrokenResourceError:
                session.close()
                raise NodeGoneError(f"{self.link.host}: the SSH connection was lost") from None
        return SshProcess(
            session,
            host=self.link.host,
            pid=report.pid,
            signal_group=functools.partial(self._signal_group, report.pid, report.start),
            stop_policy=self._stop_policy,
            stdout_held=functools.partial(self._holds_pipe, report.pipe, report.pid) if report.pipe else None,
        )

    async def _give_up(self, session: Session, options: SpawnOptions) -> None:
        """A spawn that ran out of time leaves nothing: its stdin ends (a preamble still
        reading the environment exits, never running the command); a command that started
        meanwhile (its report on the way) has its group killed; the session is closed."""
        with anyio.move_on_after(_GIVE_UP):
            session.write_eof()
            try:
                report = await self._handshake(session, options)
            except NodeprovError:
                pass  # it ended without starting the command
            else:
                await self._signal_group(report.pid, report.start, "KILL")
        session.close()

    async def _handshake(self, session: Session, options: SpawnOptions) -> Report:
        """Read the preamble's report; close the session and raise (as
        :func:`~nodeprov.exec.read_report`) if the command could not be started."""
        try:
            return await read_report(session, options, f"node {self.node_id} ({self.link.host})")
        except NodeprovError:
            session.close()
            raise

    async def write_file(self, path: str, data: bytes | AsyncIterable[bytes], *, mode: int = 0o600) -> None:
        """As :meth:`NodeHandle.write_file`, over SFTP when the host offers it: written
        beside the target (created exclusively, 0600), renamed over it once every byte is
        there (see :meth:`_commit`), parents made 0700."""
        sftp = await self.link.sftp()
        if sftp is None:
            await super().write_file(path, data, mode=mode)
            return
        target = self.node_path(path)
        if not 0 <= mode <= 0o7777:
            raise ConfigError(f"invalid file mode {mode:o}")
        partial = f"{target}.nodeprov-{secrets.token_hex(6)}"
        try:
            await self._not_a_directory(sftp, target)
            with _file_errors(self.node_id, target):
                private = asyncssh.SFTPAttrs(permissions=0o700)
                await sftp.makedirs(posixpath.dirname(target), attrs=private, exist_ok=True)
                async with sftp.open(
                    partial, _EXCLUSIVE, attrs=asyncssh.SFTPAttrs(permissions=0o600), encoding=None
                ) as file:
                    if isinstance(data, bytes):
                        await file.write(data)
                    else:
                        async for chunk in data:
                            await file.write(chunk)
                await sftp.chmod(partial, mode)
            await self._commit(sftp, partial, target)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10), suppress(asyncssh.Error, OSError):
                await sftp.remove(partial)
            raise

    @asynccontextmanager
    async def read_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """As :meth:`NodeHandle.read_file`, over SFTP when the host offers it."""
        sftp = await self.link.sftp()
        if sftp is None:
            async with super().read_file(path) as chunks:
                yield chunks
            return
        target = self.node_path(path)
        await self._not_a_directory(sftp, target)
        with _file_errors(self.node_id, target):
            file = await sftp.open(target, "rb", encoding=None)
        try:

            async def content() -> AsyncIterator[bytes]:
                while True:
                    with _file_errors(self.node_id, target):
                        chunk = cast(bytes, await file.read(_CHUNK))
                    if not chunk:
                        return
                    yield chunk

            yield content()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10), suppress(asyncssh.Error, OSError):
                await file.close()

    async def _commit(self, sftp: asyncssh.SFTPClient, partial: str, target: str) -> None:
        """Rename ``partial`` over ``target``: POSIX rename over SFTP, or ``mv`` through the
        exec channel where the server does not offer (or denies) that extension."""
        # SFTP's plain rename will not replace a file; rename(2) through a command will.
        unsupported = (asyncssh.SFTPOpUnsupported, asyncssh.SFTPPermissionDenied)
        with _file_errors(self.node_id, target), suppress(*unsupported):
            await sftp.posix_rename(partial, target)
            return
        code, _, error = await run_script(self.link, 'exec mv -f -- "$1" "$2"', partial, target)
        if code != 0:
            raise NodeFileError(f"{target} on node {self.node_id}: {said(code, error)}")

    async def _not_a_directory(self, sftp: asyncssh.SFTPClient, target: str) -> None:
        with _file_errors(self.node_id, target):
            directory = await sftp.isdir(target)
        if directory:
            raise NodeFileError(f"{target} on node {self.node_id}: is a directory")

    async def _holds_pipe(self, pipe: str, pid: int) -> bool:
        code, _, _ = await run_script(self.link, HOLDS_PIPE_SCRIPT, pipe, str(pid))
        return code != 1  # anything but a clear "no": held

    async def _signal_group(self, pid: int, start: str, signal: str) -> None:
        try:
            await run_script(self.link, SIGNAL_GROUP, signal, str(pid), start, seconds=10)
        except NodeGoneError:
            logger.warning("node %s: could not signal process %d: the connection is lost", self.node_id, pid)

    async def _destroy(self) -> None:
        code, _, error = await run_script(self.link, DESTROY, self.directory, "0")
        if code != 0:
            raise ProviderError(f"cannot remove node {self.node_id} on {self.link.host}: {said(code, error)}")


@functools.cache
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """The SHA-256 of a tool file (cached per size and modification time)."""
    del size, mtime_ns  # the cache key
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# $1: a cached tool. Prints its SHA-256 (sha256sum's line), or fails if there is none.
_CACHED_DIGEST = """[ -x "$1" ] && [ ! -L "$1" ] && exec sha256sum -- "$1" """


async def upload_tool(link: Link, root: str, name: str, path: str) -> str:
    """Copy the executable ``path`` of this machine to the host, once per content, under
    ``root/.tools``; return where it lies there.

    Raises:
        ConfigError, ProviderError, NodeGoneError: as :func:`run_script`; ProviderError also
            when the copy fails.
    """
    try:
        info = await anyio.Path(path).stat()
    except OSError as error:
        raise ProviderError(f"tool {name!r}: cannot read {path}: {error}") from None
    digest = await anyio.to_thread.run_sync(_digest, path, info.st_size, info.st_mtime_ns)
    remote = posixpath.join(root, TOOLS_DIR, f"{digest[:24]}-{name}")
    # The cache is the login's, and so writable by every node's processes: a copy is used
    # only while its content is still this one, checked for each node that gets it.
    code, out, _ = await run_script(link, _CACHED_DIGEST, remote)
    if code == 0 and out.split(b" ", 1)[0].decode(errors="replace") == digest:
        return remote
    if code == 0:
        logger.warning(
            "tool %r: the copy at %s:%s was changed since it was made: copied again", name, link.host, remote
        )
    session = await link.open(script_line(UPLOAD, remote, str(info.st_size)))
    try:
        async with await anyio.open_file(path, "rb") as file:
            while chunk := await file.read(_CHUNK):
                await session.send(chunk)
        session.write_eof()
        await session.exited()
    except anyio.BrokenResourceError:
        pass  # the script ended early: its status says why
    finally:
        session.close()
    if session.exit_status != 0:
        raise ProviderError(f"tool {name!r}: copying it to {link.host}:{remote} failed")
    return remote


@contextmanager
def _file_errors(node_id: str, path: str) -> Iterator[None]:
    """SFTP's errors as nodeprov's file errors (a lost connection as NodeGoneError)."""
    try:
        yield
    except (asyncssh.SFTPNoSuchFile, asyncssh.SFTPNoSuchPath) as error:
        raise NodeFileNotFoundError(f"{path} on node {node_id}: {error.reason}") from None
    except asyncssh.SFTPError as error:
        raise NodeFileError(f"{path} on node {node_id}: {error.reason}") from None
    except (asyncssh.DisconnectError, asyncssh.ConnectionLost, OSError) as error:
        raise NodeGoneError(f"node {node_id}: the SSH connection was lost ({error})") from None


def ttl_seconds(ttl: timedelta | None) -> str:
    """A node lifetime as the watchdog's argument (empty: for ever)."""
    return "" if ttl is None else str(max(1, int(ttl.total_seconds())))
