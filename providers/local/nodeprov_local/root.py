"""The local provider's root and the nodes' directories in it: checked before anything under
it is trusted (it decides what is deleted and signalled), and removed without ever crossing
a file-system boundary."""

from __future__ import annotations

import os
import re
import stat
from contextlib import suppress
from itertools import takewhile
from pathlib import Path

from nodeprov.errors import ConfigError, ProviderError, ProvisionError

__all__ = ["check_root", "make_root", "mount_points", "remove_tree", "strictly_inside"]


def remove_tree(path: Path) -> list[str]:
    """Remove ``path``: a file or symlink itself (not what it points to), a directory with all
    it holds, but never across a file-system boundary. A mount point inside (a bind mount
    too, on the same file system) is left, with the directories above it, and named in the
    result: what is mounted there is not the node's to delete."""
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(top.st_mode):
        path.unlink(missing_ok=True)
        return []
    mounts, left = mount_points(), []

    def clear(directory: str) -> bool:
        """Empty ``directory`` within the boundary; whether it is empty now."""
        empty = True
        with os.scandir(directory) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode):
                    with suppress(FileNotFoundError):
                        os.unlink(entry.path)
                elif info.st_dev != top.st_dev or os.path.realpath(entry.path) in mounts:
                    left.append(entry.path)
                    empty = False
                elif clear(entry.path):
                    with suppress(FileNotFoundError):
                        os.rmdir(entry.path)
                else:
                    empty = False
        return empty

    if path.resolve().as_posix() in mounts:
        return [str(path)]
    if clear(str(path)):
        with suppress(FileNotFoundError):
            os.rmdir(path)
    return left


def mount_points() -> set[str]:
    """The mount points of this process's mount namespace (from ``/proc``; none where there
    is none: then the device check alone tells other file systems apart)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return set()
    # Field 5 is the mount point, with space, tab, newline and backslash escaped in octal.
    return {
        re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
        for line in lines
        if len(fields := line.split()) > 4
    }


def check_root(root: Path) -> bool:
    """Whether ``root`` exists; raises ConfigError if it does and cannot be trusted: everything
    under it decides what is deleted and signalled."""
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return False
    except OSError as error:
        raise ProviderError(f"cannot examine the local provider root {root}: {error}") from None
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
        f"local provider root {root} {why}; refused: it must be a directory of this user's "
        "that only this user can write to (mode 0700)"
    )


def make_root(root: Path) -> None:
    """Create ``root`` and its missing parents with mode 0700, then check it."""
    for path in reversed(list(takewhile(lambda p: not os.path.lexists(p), [root, *root.parents]))):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass  # made meanwhile; checked below if it is the root
        except OSError as error:
            raise ProvisionError(f"cannot create the local provider root {root}: {error}") from None
    check_root(root)


def strictly_inside(root: Path, path: Path) -> bool:
    """Whether ``path`` is no symlink and lies strictly inside ``root``: the test before removing it."""
    resolved, base = path.resolve(), root.resolve()
    return not path.is_symlink() and resolved != base and resolved.is_relative_to(base)
