"""Removing a local node's directory without ever crossing a file-system boundary (the root
itself is checked by :mod:`nodeprov.roots`, as the fake provider's is)."""

from __future__ import annotations

import os
import re
import stat
from contextlib import suppress
from pathlib import Path

__all__ = ["mount_points", "remove_tree"]


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
                elif info.st_dev != top.st_dev or entry.path in mounts:
                    left.append(entry.path)
                    empty = False
                elif clear(entry.path):
                    with suppress(FileNotFoundError):
                        os.rmdir(entry.path)
                else:
                    empty = False
        return empty

    # Walked from its real path, a directory entered (never a symlink) is named by its real
    # path too: compared with the mount points as it is, with no realpath() per entry.
    real = os.path.realpath(path)
    if real in mounts:
        return [str(path)]
    if clear(real):
        with suppress(FileNotFoundError):
            os.rmdir(real)
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
