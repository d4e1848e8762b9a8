"""Who a node belongs to, and when it may be reaped: the ``nodeprov.*`` labels every
resource of a node carries, owners named by process (:func:`default_owner`) and the rules a
reaper follows (:func:`abandoned`, :func:`expired`)."""

from __future__ import annotations

import functools
import os
import re
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "LABEL_EXPIRES_AT",
    "LABEL_NODE_ID",
    "LABEL_OWNER",
    "LABEL_PROVISION",
    "LABEL_SESSION_ID",
    "OwnerCheck",
    "abandoned",
    "default_owner",
    "expired",
    "is_node_id",
    "owner_alive",
    "pid_namespace",
    "process_start_time",
]

LABEL_NODE_ID = "nodeprov.node-id"
LABEL_SESSION_ID = "nodeprov.session-id"
LABEL_OWNER = "nodeprov.owner"
LABEL_EXPIRES_AT = "nodeprov.expires-at"
LABEL_PROVISION = "nodeprov.provision"
"""A digest of :attr:`NodeConfig.provision_key`: the mark of the provisioning that made the node."""

_NODE_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def process_start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), or ``None`` if
    there is no such process or it has exited (a zombie). With the pid, it names a process
    in a way a recycled pid cannot imitate."""
    try:
        # After the parenthesised command name: field 3 is the state, field 22 the start.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


@functools.cache
def pid_namespace() -> str:
    """This process's PID namespace and boot (``inode.boot-id``): pids mean something only
    within both, and a hostname is shared by containers, pods and cloned machines."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "unknown"
    return f"{namespace}.{boot}"


def default_owner() -> str:
    """Identify this control-plane process as ``host:pid:start:namespace`` (see
    :func:`process_start_time`), so a reaper in the same PID namespace can tell a live owner
    from a recycled pid. Orchestrators with a store own nodes by lease instead (see
    :mod:`nodeprov.runs`), which works across hosts."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid) or '0'}:{pid_namespace()}"


def owner_alive(owner: str) -> bool | None:
    """Whether the control-plane process named by ``owner`` (see :func:`default_owner`) lives.

    ``None`` when it cannot be told from here: another host or PID namespace, or an owner of
    another form (a lease, ``cli:USER@HOST``). A recycled pid is told apart by its start time.
    """
    host, pid, start, namespace = [*owner.split(":", 3), "", "", ""][:4]
    if host != socket.gethostname() or not pid.isdigit():
        return None
    if namespace and namespace != pid_namespace():
        return None
    started = process_start_time(int(pid))
    if started is None:
        return False
    return start in ("", "0") or started == start


OwnerCheck = Callable[[str], "bool | None"]
"""Whether the owner named by a ``nodeprov.owner`` label is alive: ``True``, ``False``, or
``None`` when it cannot be told (the node is then kept until it expires)."""


def abandoned(
    labels: Mapping[str, str], now: datetime | None = None, *, alive: OwnerCheck = owner_alive
) -> str | None:
    """Why a node with these labels may be reaped, or ``None`` if it must be kept.

    A node is abandoned when its ``nodeprov.expires-at`` has passed, or when ``alive`` says
    its owner is gone. A node whose owner cannot be checked is kept until it expires.
    """
    if (why := expired(labels, now)) is not None:
        return why
    owner = labels.get(LABEL_OWNER, "")
    if alive(owner) is False:
        return f"owner {owner} is gone"
    return None


def expired(labels: Mapping[str, str], now: datetime | None = None) -> str | None:
    """Why a node with these labels is past its hard lifetime (``nodeprov.expires-at``), or
    ``None`` while it is not (or has none)."""
    expires = labels.get(LABEL_EXPIRES_AT)
    if not expires:
        return None
    try:
        if datetime.fromisoformat(expires) <= (now or datetime.now(UTC)):
            return f"expired at {expires}"
    except ValueError:
        return f"unreadable expiry {expires!r}"
    return None


def is_node_id(value: str) -> bool:
    """Whether ``value`` is a valid node id (see :attr:`NodeConfig.node_id`). A node id read
    back from a platform (a label, a tag, a record) is trusted only if it is one."""
    return _NODE_ID.fullmatch(value) is not None  # not match(): "$" would let a trailing newline in
