"""Processes that outlive their exec channel: :func:`keep` starts one under a *keeper* on the
node, :func:`reattach` finds it again, and :class:`KeptProcess` is the
:class:`~nodeprov.spawn.SpawnedProcess` over it, which re-attaches by itself when its
channel drops.

The keeper needs a POSIX ``sh``, GNU coreutils (``tail --pid``, ``stat``, ``date``,
``touch``, ``mkfifo``), ``setsid``, ``flock`` and ``fallocate`` (util-linux),
``awk`` and ``grep`` on the node, nothing else, and a filesystem that punches holes in files
(ext4, xfs, btrfs, tmpfs, overlayfs on them; a keeper on one that cannot does not start). It
lives in a private directory (0700) on the node:

- ``out`` and ``err``: the journals of the process's stdout and stderr, appended as it
  writes; an attach reads them from a byte offset and follows them (``tail -f``: woken by
  inotify, looking every 20 ms only whether the process lives; or polling every 2 ms where
  tail trusts no inotify, as on a container's overlayfs), so nothing the process said is
  lost while no channel is there;
- ``in``: a FIFO, the process's stdin, fed from ``in.log`` by one long-lived ``awk`` that
  writes each frame's payload once, in order of the frames' ids: what a control plane sent
  twice across a drop reaches the process once; after each frame, a note in ``fed`` (its
  id, and how far ``in.log`` was read), which the attach reports to the control plane: it
  holds each frame only until then;
- ``lease``: touched every few seconds by a live attach. When nothing touched it for
  ``grace`` seconds (no control plane attached), or at the node's ``expires_at``, the keeper
  sends the process group SIGTERM, ``term_grace`` seconds later SIGKILL, and sweeps what the
  process started (it carries the keeper's mark, found through ``/proc``): a kept process is
  never unsupervised for ever;
- ``pid``, ``rc`` (the exit status, and why: ``exit``, ``lease``, ``ttl`` or ``stop``),
  ``attach`` (the processes of the current attach, which the next attach ends first, under
  the lock ``attach.lock``: one writer at a time), ``gen`` (the current attach's generation:
  a control plane whose attach was taken cannot attach again with the one it held).

Nothing there grows for ever: what was fed of ``in.log`` and what the control plane has read
of ``out`` and ``err`` (less :attr:`KeepOptions.keep_read` bytes behind the reader, for an
attach from before there) is freed as it goes, by punching holes (``fallocate -p``), so
every byte keeps its offset: ``tail -f`` and an attach from an offset go on as before. The
journals' *bases*, below which their bytes are gone, are kept in ``base.0`` and ``base.1``;
an attach from below the base of stdout fails (:class:`~nodeprov.errors.NodeGoneError`),
one from below that of stderr starts at its base. A kept process's directory holds at most
:data:`JOURNAL_CAP` bytes beyond its output not yet read and its input not yet fed, once the
node has freed what it was told to (a ``fallocate`` behind the reader). The control plane
holds, of the process, the stdin frames not yet heard fed (:attr:`KeptProcess.unfed`).

Once the process has ended and its last bytes were read, the control plane releases the
directory; a keeper nobody releases removes it ``grace`` seconds after the last attach.
"""

from __future__ import annotations

import logging
import math
import posixpath
import secrets
from contextlib import suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..errors import CommandNotFoundError, NodeGoneError, SpawnError
from ..exec.keeper import FEED, KEEPER, STOP, TRIM_STEP
from ..spawn import SpawnedProcess, SpawnOptions
from .kept_io import ACK_STEP, KEEP_READ
from .kept_process import (
    ChannelWatch,
    Detached,
    KeepOptions,
    KeptProcess,
    Reattached,
    _run,
    _StartFailedError,
    _status,
)
from .ownership import LABEL_EXPIRES_AT

if TYPE_CHECKING:
    from .handle import NodeHandle

__all__ = [
    "JOURNAL_CAP",
    "ChannelWatch",
    "Detached",
    "KeepOptions",
    "KeptProcess",
    "Reattached",
    "keep",
    "keeper_root",
    "kept_state",
    "reattach",
    "stop_kept",
    "stopped_by_keeper",
]

logger = logging.getLogger("nodeprov")

_START_WAIT = 10  # seconds an attach waits for the keeper it started to start the process

JOURNAL_CAP = 2 * KEEP_READ + 2 * ACK_STEP + 2 * TRIM_STEP
"""Bytes a keeper's directory holds at most (a few KiB more: its small files, the block a
hole ends in) beyond the output not yet read and the input not yet fed, with the default
``keep_read`` (each more byte of it is one more of stdout and of stderr): of each journal,
``keep_read`` behind the reader and a step of acknowledgement; of ``in.log`` and the
feeder's notes, a step each."""


def _seconds(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _expiry(node: NodeHandle, options: KeepOptions) -> str:
    expires = options.expires_at
    if expires is None and node.labels.get(LABEL_EXPIRES_AT):
        with suppress(ValueError):
            expires = datetime.fromisoformat(node.labels[LABEL_EXPIRES_AT])
    if expires is None:
        return ""
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=UTC)
    return str(math.ceil(expires.timestamp()))


def keeper_root(node: NodeHandle) -> str:
    """Where a node's keepers live: ``$HOME/.nodeprov/keep`` of the node (under its workdir
    when it has no HOME)."""
    return posixpath.join(node.base_env.get("HOME") or node.workdir, ".nodeprov", "keep")


async def keep(node: NodeHandle, options: SpawnOptions, settings: KeepOptions | None = None) -> KeptProcess:
    """Start ``options`` on ``node`` under a keeper and attach to it (see the module).

    The process gets ``options.env`` over the node's environment and ``options.cwd``, as a
    spawn's, and one variable more, ``NODEPROV_GUARD`` (the keeper's mark). It leads a
    session of its own; the node's destroy ends it with the node.

    Raises:
        CommandNotFoundError: there is no ``options.command`` on the node.
        SpawnError: the node lacks what the keeper needs (which tool is said), or the
            keeper could not start.
        NodeGoneError: the node is gone.
    """
    settings = settings or KeepOptions()
    directory = posixpath.join(keeper_root(node), secrets.token_hex(12))
    kept = ["=" + options.env[name] if name in options.env else "" for name in ("PWD", "SHLVL")]
    args = [
        directory,
        str(math.ceil(settings.grace)),
        _seconds(settings.term_grace),
        _expiry(node, settings),
        secrets.token_hex(12),
        *kept,
        *options.argv,
    ]
    env = {**options.env, "NP_FEED": FEED}
    if settings.on_start is not None:
        await settings.on_start(directory)
    await node.spawn_detached(
        SpawnOptions("/bin/sh", ["-c", KEEPER, "nodeprov-keeper", *args], options.cwd, env)
    )
    try:
        return await _reattach(node, directory, settings, 0, 0, wait=_START_WAIT)
    except _StartFailedError as failed:
        reason = str(failed)
        if reason == "notfound":
            raise CommandNotFoundError(f"no command {options.command!r} on node {node.node_id}") from None
        if reason.startswith("missing "):
            raise SpawnError(f"node {node.node_id} cannot keep a process: it has no {reason[8:]}") from None
        raise SpawnError(f"cannot keep {options.command!r} on node {node.node_id}: {reason}") from None
    except NodeGoneError:  # it never made its directory: it could not say why there
        path = options.env.get("PATH") or node.base_env.get("PATH") or "the default"
        raise SpawnError(
            f"node {node.node_id} cannot keep a process: its keeper did not start (no mkdir on the "
            f"PATH it was given, {path}, or no room for {directory})"
        ) from None


async def kept_state(node: NodeHandle, keeper: str) -> str:
    """How the kept process of ``keeper`` stands on ``node``: ``running``, ``exited`` (its
    output not yet released), or ``gone``.

    Raises:
        NodeGoneError, SpawnError, ProviderError: as :meth:`NodeHandle.spawn`.
    """
    said = await _status(node, keeper)
    return {"exit": "exited", "running": "running"}.get(said[0] if said else "", "gone")


async def stop_kept(node: NodeHandle, keeper: str, *, term_grace: float) -> str:
    """Stop the kept process of ``keeper`` on ``node`` without attaching to it: SIGTERM to
    its group, SIGKILL ``term_grace`` seconds later; returns once the keeper has recorded its
    end (what it started is gone by then), as :func:`kept_state` says it (``running`` only
    when it outlived ``term_grace`` and 5 s more). A process that ended or is gone is left as
    it is. Its output stays for an attach to read.

    Raises:
        NodeGoneError, SpawnError, ProviderError: as :meth:`NodeHandle.spawn`.
    """
    script = ["-c", STOP, "nodeprov-stop", keeper, str(math.ceil(term_grace))]
    said = (await _run(node, SpawnOptions("/bin/sh", script))).decode(errors="replace").split()
    return {"exit": "exited", "running": "running"}.get(said[0] if said else "", "gone")


def stopped_by_keeper(process: SpawnedProcess | None) -> str | None:
    """Why the keeper stopped ``process``, in words, when it was a kept process the keeper
    stopped (the node's lifetime, or no control plane attached for its grace); else None."""
    why = process.ended_by if isinstance(process, KeptProcess) else ""
    if why == "ttl":
        return "the node reached the end of its lifetime, and its keeper stopped the agent"
    if why == "lease":
        return "no control plane attached to the agent for its grace, and its keeper stopped it"
    if why == "term":
        return "the agent's keeper was told to stop (SIGTERM), and stopped the agent"
    return None


async def reattach(
    node: NodeHandle,
    keeper: str,
    *,
    stdout_offset: int = 0,
    stderr_offset: int = 0,
    settings: KeepOptions | None = None,
) -> KeptProcess:
    """Attach to the kept process of ``keeper`` (:attr:`KeptProcess.keeper`) on ``node``,
    its stdout and stderr read on from the offsets given, ending the attach before it
    (another control plane's, say).

    Raises:
        NodeGoneError: the keeper is gone (released, or removed once nobody attached for its
            grace), or the node is; or the node freed the stdout before ``stdout_offset``
            (read by another handle more than its ``keep_read`` ago).
        SpawnError: the node could not start the attach.
    """
    return await _reattach(node, keeper, settings or KeepOptions(), stdout_offset, stderr_offset)


async def _reattach(
    node: NodeHandle, keeper: str, settings: KeepOptions, *offsets: int, wait: int = 0
) -> KeptProcess:
    process = KeptProcess(node, keeper, settings, *offsets)
    await process._attach(wait)
    node.track(process)
    return process
