"""The SQLite store's file, against SQLite's "How To Corrupt An SQLite Database File": no
descriptor of ours drops the process's locks, a second copy of SQLite is not needed, a
filesystem without working locks and a file with two names are refused, a file moved away
under a live store and a connection carried across fork() fail rather than lose writes, and
the SQLite bundled is one without the WAL-reset bug."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import apsw
import pytest

from nodeprov.errors import ConfigError, StoreError
from nodeprov.store import Store
from nodeprov.store._sqlite import NETWORK_FILESYSTEMS, filesystem_of

pytestmark = pytest.mark.anyio

# Where SQLite's unix VFS takes its locks on the database file (os_unix.c): the shared range
# a reader holds; a process that can take it for writing believes nobody else has the file.
_SHARED_FIRST = 0x40000000 + 2
_SHARED_SIZE = 510


def _lock_holder(path: Path) -> int | None:
    """The pid of a process holding a read lock on ``path``'s shared byte range, asked from
    a process of its own (F_GETLK reports other processes' locks only)."""
    code = f"""
import fcntl, os, struct, sys
fd = os.open({str(path)!r}, os.O_RDWR)
query = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, {_SHARED_FIRST}, {_SHARED_SIZE}, 0)
kind, _, _, _, pid = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, query))
print(pid if kind != fcntl.F_UNLCK else 0)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    pid = int(done.stdout)
    return pid or None


async def test_opening_more_stores_keeps_the_locks_the_process_holds(tmp_path: Path) -> None:
    """A store open in this process holds its shared lock on the file; opening more stores on
    it (a lease's heartbeats, a second orchestrator) must not drop it. They did, when an open
    made sure of the file's mode with a descriptor of its own: POSIX locks belong to the
    process, and closing any descriptor on the file drops all of them."""
    url = f"sqlite:///{tmp_path}/locks.db"
    async with await Store.open(url) as first:
        await first.run_counts()
        assert _lock_holder(tmp_path / "locks.db") == os.getpid()
        async with await Store.open(url) as second:
            await second.run_counts()
            assert _lock_holder(tmp_path / "locks.db") == os.getpid()
            lease = await first.leases.acquire("me", 30)
            assert await first.leases.renew(lease.id, 30)  # its heartbeats' own connection
            assert _lock_holder(tmp_path / "locks.db") == os.getpid()


async def test_a_new_store_file_and_its_wal_are_private(tmp_path: Path) -> None:
    async with await Store.open(f"sqlite:///{tmp_path}/new/store.db") as store:
        await store.leases.acquire("me", 30)
        for name in ("store.db", "store.db-wal", "store.db-shm"):
            assert (tmp_path / "new" / name).stat().st_mode & 0o777 == 0o600, name
        assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700


def test_filesystems_whose_locks_do_not_work_are_told_from_the_mount_table() -> None:
    mounts = "\n".join(
        [
            "22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw",
            "40 22 0:35 / /srv/shared rw,relatime - nfs4 server:/export rw,vers=4.2",
            "41 22 0:36 / /srv/shared/local rw - tmpfs tmpfs rw",
            r"42 22 0:37 / /mnt/with\040space rw - cifs //host/share rw",
        ]
    )
    assert filesystem_of("/home/me/.local/state/nodeprov/nodeprov.db", mounts) == "ext4"
    assert filesystem_of("/srv/shared/nodeprov.db", mounts) == "nfs4"
    assert filesystem_of("/srv/shared/local/nodeprov.db", mounts) == "tmpfs"
    assert filesystem_of("/srv/sharedx/nodeprov.db", mounts) == "ext4"
    assert filesystem_of("/mnt/with space/nodeprov.db", mounts) == "cifs"
    assert {"nfs", "nfs4", "cifs", "9p", "fuse.sshfs"} <= NETWORK_FILESYSTEMS


async def test_a_file_with_two_names_is_refused(tmp_path: Path) -> None:
    async with await Store.open(f"sqlite:///{tmp_path}/one.db"):
        pass
    os.link(tmp_path / "one.db", tmp_path / "two.db")
    with pytest.raises(StoreError, match="hard links"):
        await Store.open(f"sqlite:///{tmp_path}/two.db")


async def test_a_symbolic_link_is_followed_so_the_wal_is_beside_the_real_file(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link.db").symlink_to(tmp_path / "real" / "store.db")
    async with await Store.open(f"sqlite:///{tmp_path}/link.db") as store:
        await store.leases.acquire("me", 30)
        assert (tmp_path / "real" / "store.db-wal").exists()
        assert not (tmp_path / "link.db-wal").exists()


async def test_a_file_moved_away_while_in_use_fails_rather_than_loses_writes(tmp_path: Path) -> None:
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        await store.leases.acquire("me", 30)
        (tmp_path / "store.db").rename(tmp_path / "elsewhere.db")
        with pytest.raises(StoreError, match="moved or deleted while in use"):
            await store.leases.acquire("me", 30)
        with pytest.raises(StoreError, match="moved or deleted while in use"):
            await store.run_counts()


async def test_a_store_is_not_used_across_a_fork(tmp_path: Path) -> None:
    """A child made by fork() that uses its parent's store is refused; the parent's goes on."""
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        await store.leases.acquire("parent", 30)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, never return into the test runner
            said_in_child: list[bytes] = []

            def use() -> None:  # a thread of its own: the test's event loop runs in this one
                try:
                    anyio.run(store.leases.acquire, "child", 30.0)
                    said_in_child.append(b"used")
                except StoreError as error:
                    said_in_child.append(str(error).encode())
                except BaseException as error:
                    said_in_child.append(repr(error).encode())

            thread = threading.Thread(target=use)
            thread.start()
            thread.join()
            os.write(write, b"".join(said_in_child))
            os._exit(0)
        os.close(write)
        said = await anyio.to_thread.run_sync(_read_all_and_reap, read, pid)
        assert b"forked" in said, said
        await store.leases.acquire("parent", 30)
        assert len(await store.leases.live()) == 2


def _read_all_and_reap(fd: int, pid: int) -> bytes:
    said = b""
    while chunk := os.read(fd, 4096):
        said += chunk
    os.close(fd)
    os.waitpid(pid, 0)
    return said


def test_the_bundled_sqlite_has_no_wal_reset_bug() -> None:
    """sqlite.org/wal.html#walresetbug: 3.7.0 to 3.51.2, fixed in 3.51.3."""
    version = tuple(int(part) for part in apsw.sqlite_lib_version().split("."))
    assert version >= (3, 51, 3), apsw.sqlite_lib_version()


async def test_text_with_nul_is_refused_before_it_reaches_the_database(tmp_path: Path) -> None:
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        with pytest.raises(ConfigError, match="NUL"):
            await store.active_session("work\x00space", "claude")
        assert await store.sessions() == []
