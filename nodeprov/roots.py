"""Directories of nodes on this machine, and what makes one trustworthy.

A provider that keeps its nodes as directories under a root (the local provider, the fake
one for tests) decides what to delete and which processes to signal from what it reads
there. Whoever can write to that root could make it delete files or kill processes, so a
root is used only when it is a real directory of this user's that nobody else can write to,
and a node's directory only when it lies strictly inside the root, is no symlink, and is
named by a valid node id. Synchronous: call these in a worker thread.
"""

from __future__ import annotations

import os
import stat
from itertools import takewhile
from pathlib import Path

from .errors import ConfigError, ProviderError, ProvisionError
from .node import is_node_id

__all__ = ["check_root", "make_root", "node_directory", "strictly_inside"]


def check_root(root: Path, what: str) -> bool:
    """Whether ``root`` exists.

    Raises:
        ConfigError: it exists and cannot be trusted (a symlink, not a directory, another
            user's, or writable by group or others); ``what`` names it in the message.
        ProviderError: it cannot be examined.
    """
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return False
    except OSError as error:
        raise ProviderError(f"cannot examine the {what} {root}: {error}") from None
    if stat.S_ISLNK(info.st_mode):
        why = "is a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        why = "is not a directory"
    elif info.st_uid != os.getuid():
        why = f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return True
    raise ConfigError(
        f"{what} {root} {why}; refused: it must be a directory of this user's "
        "that only this user can write to (mode 0700)"
    )


def make_root(root: Path, what: str) -> None:
    """Create ``root`` and its missing parents with mode 0700, then check it.

    Raises:
        ProvisionError: it cannot be created.
        ConfigError, ProviderError: as :func:`check_root`.
    """
    for path in reversed(list(takewhile(lambda p: not os.path.lexists(p), [root, *root.parents]))):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass  # made meanwhile; checked below if it is the root
        except OSError as error:
            raise ProvisionError(f"cannot create the {what} {root}: {error}") from None
    check_root(root, what)


def strictly_inside(root: Path, path: Path) -> bool:
    """Whether ``path`` is no symlink and lies strictly inside ``root``: the test before removing it."""
    resolved, base = path.resolve(), root.resolve()
    return not path.is_symlink() and resolved != base and resolved.is_relative_to(base)


def node_directory(root: Path, node_id: str) -> Path | None:
    """The directory of node ``node_id`` under ``root``, or ``None`` when that id is not a node
    id or the directory is not a real one strictly inside the root (a planted record may
    name ``../victim``)."""
    if not is_node_id(node_id):
        return None
    directory = root / node_id
    return directory if strictly_inside(root, directory) else None
