"""Workspace checkpoints (nodeprov.checkpoints) on local nodes: hostile archives and
manifests refused (a test for each escape), a restore cut short or failing leaves the
workspace as it was, a later capture stores only what changed, secrets stay out, and the
object stores (a directory; S3 on moto's server)."""

from __future__ import annotations

import io
import os
import socket
import tarfile
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import boto3
import pytest

from nodeprov import NodeConfig, get_provider
from nodeprov.checkpoints import DirectoryObjects, Manifest, capture, changes, open_objects, restore
from nodeprov.checkpoints.tar import members
from nodeprov.errors import ArchiveRefusedError, CheckpointError, ConfigError
from nodeprov.store import Store
from nodeprov.testing.conformance import read_all, run, wait_until

pytestmark = pytest.mark.anyio


def _archive(*items: tuple[str, bytes, str] | tarfile.TarInfo, fmt: int = tarfile.GNU_FORMAT) -> bytes:
    """A tar archive of ``items``: (name, data, "file"|"dir"|"symlink:TARGET"|"hardlink:TARGET")."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
        for item in items:
            if isinstance(item, tarfile.TarInfo):
                archive.addfile(item)
                continue
            name, data, kind = item
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind.startswith("symlink:"):
                info.type, info.linkname = tarfile.SYMTYPE, kind.partition(":")[2]
            elif kind.startswith("hardlink:"):
                info.type, info.linkname = tarfile.LNKTYPE, kind.partition(":")[2]
            else:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buffer.getvalue()


async def _chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def _read(data: bytes) -> list[str]:
    found = []
    async for member, content in members(_chunks(data)):
        found.append(member.path)
        async for _ in content:
            pass
    return found


HOSTILE_ARCHIVES = {
    "an absolute path": (_archive(("/etc/cron.d/x", b"x", "file")), "absolute path"),
    "a climb out": (_archive(("a/../../x", b"x", "file")), "climbs out"),
    "a write through an outward link": (
        _archive(("l", b"", "symlink:/etc"), ("l/passwd", b"x", "file")),
        "under a symbolic link",
    ),
    "a write through an inward link": (
        _archive(("d", b"", "dir"), ("l", b"", "symlink:d"), ("l/x", b"x", "file")),
        "under a symbolic link",
    ),
    "a directory replaced by a link": (
        _archive(("d", b"", "dir"), ("d", b"", "symlink:/etc"), ("d/x", b"x", "file")),
        "comes twice",
    ),
    "a hard link out": (_archive(("h", b"", "hardlink:/etc/passwd")), "leaves the archive"),
    "a hard link climbing out": (_archive(("h", b"", "hardlink:../../etc/passwd")), "leaves the archive"),
    "a hard link to nothing before it": (
        _archive(("h", b"", "hardlink:later"), ("later", b"x", "file")),
        "not a file before it",
    ),
    "a hard link to a directory": (_archive(("d", b"", "dir"), ("h", b"", "hardlink:d")), "not a file"),
    "a long GNU name climbing out": (_archive(("../" + "x" * 200, b"x", "file")), "climbs out"),
    "a root that is a file": (_archive((".", b"x", "file")), "not a directory"),
    "an archive cut short": (_archive(("big", b"x" * 5000, "file"))[:2048], "ends in the middle"),
    "not an archive": (os.urandom(4096), "not a tar archive"),
}


def _pax_climbing_out() -> bytes:
    info = tarfile.TarInfo("harmless")
    info.pax_headers = {"path": "../../escaped"}
    return _archive(info, fmt=tarfile.PAX_FORMAT)


def _sparse() -> bytes:
    data = bytearray(_archive(("sparse", b"", "file")))
    data[156:157] = tarfile.GNUTYPE_SPARSE  # the type flag
    checksum = sum(data[:148]) + 8 * 32 + sum(data[156:512])
    data[148:156] = b"%06o\0 " % checksum
    return bytes(data)


HOSTILE_ARCHIVES["a pax path climbing out"] = (_pax_climbing_out(), "climbs out")
HOSTILE_ARCHIVES["a sparse file"] = (_sparse(), "kind not kept")


@pytest.mark.parametrize("name", HOSTILE_ARCHIVES)
async def test_a_hostile_archive_is_refused(name: str) -> None:
    data, says = HOSTILE_ARCHIVES[name]
    with pytest.raises(ArchiveRefusedError, match=says):
        await _read(data)


async def test_what_an_archive_may_hold_is_read_whatever_its_format() -> None:
    long = "deep/" * 30 + "file"
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        items: list[tuple[str, bytes, str]] = [
            ("./", b"", "dir"),
            ("./a", b"", "dir"),
            ("./a/f", b"x" * 1025, "file"),
        ]
        items += [("./a/link", b"", "symlink:/usr/bin"), ("./a/h", b"", "hardlink:a/f")]
        if fmt != tarfile.USTAR_FORMAT:
            items.append((long, b"y", "file"))
        assert await _read(_archive(*items, fmt=fmt)) == [
            "",
            "a",
            "a/f",
            "a/link",
            "a/h",
            *([long] if fmt != tarfile.USTAR_FORMAT else []),
        ]


HOSTILE_MANIFESTS = {
    "an absolute path": ('{"path": "/etc/x", "kind": "dir", "mode": 493, "mtime": 0}', ArchiveRefusedError),
    "a climb out": ('{"path": "../x", "kind": "dir", "mode": 493, "mtime": 0}', ArchiveRefusedError),
    "a path not normal": ('{"path": "a//b", "kind": "dir", "mode": 493, "mtime": 0}', ArchiveRefusedError),
    "a hard link": ('{"path": "h", "kind": "hardlink", "mode": 420, "mtime": 0}', ArchiveRefusedError),
    "a size its pieces do not make": (
        '{"path": "f", "kind": "file", "mode": 420, "mtime": 0, "size": 5, "pieces": []}',
        CheckpointError,
    ),
}


@pytest.mark.parametrize("name", HOSTILE_MANIFESTS)
async def test_a_hostile_manifest_is_refused(name: str) -> None:
    entry, error = HOSTILE_MANIFESTS[name]
    with pytest.raises(error):
        Manifest.from_bytes(zlib.compress(f'{{"version": 1, "entries": [{entry}], "skipped": []}}'.encode()))


def test_a_manifest_writing_through_its_own_link_is_refused() -> None:
    entries = '{"path": "l", "kind": "symlink", "mode": 511, "mtime": 0, "target": "/etc"},'
    entries += '{"path": "l/passwd", "kind": "dir", "mode": 493, "mtime": 0}'
    with pytest.raises(ArchiveRefusedError, match="under a symbolic link"):
        Manifest.from_bytes(
            zlib.compress(f'{{"version": 1, "entries": [{entries}], "skipped": []}}'.encode())
        )


async def test_a_node_whose_tar_is_hostile_gets_no_checkpoint(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (tmp_path / "hostile.tar").write_bytes(_archive(("l", b"", "symlink:/etc"), ("l/passwd", b"x", "file")))
    (fake_bin / "tar").write_text(f"#!/bin/sh\nexec cat {tmp_path / 'hostile.tar'}\n")
    (fake_bin / "tar").chmod(0o755)
    objects = DirectoryObjects(tmp_path / "objects")
    provider = get_provider("local", root=tmp_path / "nodes")
    config = NodeConfig(env={"PATH": f"{fake_bin}:/usr/bin:/bin"})
    async with await provider.provision(config) as node:
        with pytest.raises(ArchiveRefusedError, match="under a symbolic link"):
            await capture(node, objects)
    assert await objects.names() == set()


async def test_a_restore_that_fails_leaves_the_workspace_as_it_was(tmp_path: Path) -> None:
    objects = DirectoryObjects(tmp_path / "objects")
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as first, await provider.provision() as second:
        await first.write_file("new.txt", b"new")
        captured = await capture(first, objects)
        await second.write_file("old.txt", b"old")
        await objects.delete(captured.manifest.packs())
        with pytest.raises(CheckpointError, match="missing"):
            await restore(second, captured.manifest, objects)
        assert sorted(os.listdir(second.workdir)) == ["old.txt"]  # no stage left beside it


async def test_a_pack_that_does_not_hold_what_the_manifest_says_leaves_the_workspace_as_it_was(
    tmp_path: Path,
) -> None:
    objects = DirectoryObjects(tmp_path / "objects")
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as first, await provider.provision() as second:
        for number in range(12):  # several packs: the bad one is not the first fetched
            await first.write_file(f"f-{number:02}.bin", os.urandom(1 << 20))
        captured = await capture(first, objects)
        await second.write_file("old.txt", b"old")
        piece = captured.manifest.by_path["f-10.bin"].pieces[0]
        pack = tmp_path / "objects" / piece.pack[:2] / piece.pack
        spoiled = bytearray(pack.read_bytes())
        spoiled[piece.offset] ^= 1
        pack.write_bytes(spoiled)
        with pytest.raises(CheckpointError, match=f"pack {piece.pack} does not hold 'f-10.bin'"):
            await restore(second, captured.manifest, objects)
        assert sorted(os.listdir(second.workdir)) == ["old.txt"]


async def test_an_archive_that_ends_before_its_marker_is_never_swapped_in(tmp_path: Path) -> None:
    """A connection lost between two members ends the archive as its real end does, to
    ``tar``: the restore's script swaps the new files in only once the marker, the archive's
    last member, was written."""
    from nodeprov.checkpoints.restoring import _MARKER, _RESTORE  # the script on the node

    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as node:
        await node.write_file("old.txt", b"old")
        for archive, said in (
            (_archive(("new.txt", b"new", "file")), "the archive was cut short"),
            (_archive(("new.txt", b"new", "file"), (_MARKER, b"", "file")), ""),
        ):
            code, _, err = await run(
                node,
                "sh",
                "-c",
                _RESTORE,
                "restore",
                node.workdir,
                ".nodeprov-restore-t",
                "",
                _MARKER,
                stdin=archive,
            )
            assert (code != 0, err.decode().strip()) == (bool(said), said)
            assert os.listdir(node.workdir) == (["new.txt"] if not said else ["old.txt"])


async def test_a_restore_cut_short_leaves_the_workspace_as_it_was(tmp_path: Path) -> None:
    objects = DirectoryObjects(tmp_path / "objects")
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as first, await provider.provision() as second:
        await first.write_file("big.bin", os.urandom(64 << 20))
        captured = await capture(first, objects)
        await second.write_file("old.txt", b"old")
        workdir = Path(second.workdir)

        async def staging() -> bool:
            return any(name.startswith(".nodeprov-restore-") for name in os.listdir(workdir))

        async with anyio.create_task_group() as group:
            group.start_soon(restore, second, captured.manifest, objects)
            assert await wait_until(staging, 60)
            group.cancel_scope.cancel()
        assert sorted(os.listdir(workdir)) == ["old.txt"]  # the restore's undo ran, shielded, before it ended
        assert (workdir / "old.txt").read_bytes() == b"old"


async def test_two_hundred_megabytes_where_one_file_changes_store_under_one_percent_more(
    tmp_path: Path,
) -> None:
    objects = DirectoryObjects(tmp_path / "objects")
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as node:
        for number in range(200):
            (Path(node.workdir) / f"file-{number:03}.bin").write_bytes(os.urandom(1 << 20))
        first = await capture(node, objects)
        assert first.manifest.size == 200 << 20
        await node.write_file("file-042.bin", os.urandom(1 << 20))
        second = await capture(node, objects, previous=first.manifest)
    assert changes(first.manifest, second.manifest).modified == ("file-042.bin",)
    assert second.stored < (200 << 20) // 100


async def test_names_a_user_excludes_are_left_out_with_all_they_hold(tmp_path: Path) -> None:
    objects = DirectoryObjects(tmp_path / "objects")
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as node:
        for path in (
            "node_modules/a/b.js",
            "node_modules/c.js",
            "src/node_modules/d.js",
            "src/main.js",
            "deploy/.env.prod",
        ):
            await node.write_file(path, b"x")
        captured = await capture(node, objects, exclude=["node_modules"])
    assert sorted(entry.path for entry in captured.manifest.entries if entry.kind == "file") == [
        "src/main.js"
    ]
    assert sorted(line.split(":")[0] for line in captured.manifest.skipped) == [
        "deploy/.env.prod",
        "node_modules",
        "src/node_modules",
    ]


async def test_names_not_in_utf8_and_long_paths_come_back_as_they_were(tmp_path: Path) -> None:
    objects = DirectoryObjects(tmp_path / "objects")
    provider = get_provider("local", root=tmp_path / "nodes")
    long = "deep/" * 60 + "file"
    async with await provider.provision() as first, await provider.provision() as second:
        latin = os.path.join(os.fsencode(first.workdir), b"caf\xe9")
        os.mkdir(latin)
        await anyio.Path(os.fsdecode(os.path.join(latin, b"\xff.txt"))).write_bytes(b"latin-1")
        await first.write_file(long, b"far down")
        captured = await capture(first, objects)
        manifest = Manifest.from_bytes(captured.manifest.to_bytes())
        await restore(second, manifest, objects)
        back = os.path.join(os.fsencode(second.workdir), b"caf\xe9", b"\xff.txt")
        assert await anyio.Path(os.fsdecode(back)).read_bytes() == b"latin-1"
        assert await read_all(second, long) == b"far down"


async def test_a_fifo_is_left_out_and_said_so(tmp_path: Path) -> None:
    objects = DirectoryObjects(tmp_path / "objects")
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as node:
        code, _, _ = await run(node, "mkfifo", "pipe")
        assert code == 0
        captured = await capture(node, objects)
    assert captured.manifest.skipped == ("pipe: not a file, directory or link",)


async def test_the_whole_node_is_no_workspace(tmp_path: Path) -> None:
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as node:
        with pytest.raises(ConfigError):
            await capture(node, DirectoryObjects(tmp_path / "objects"), root="/")


async def test_objects_in_a_directory_are_written_once_and_private(tmp_path: Path) -> None:
    objects = open_objects((tmp_path / "objects").as_uri())
    name = "ab" * 32
    await objects.put(name, b"one")
    await objects.put(name, b"two")  # the same name is the same content: left as it is
    assert await objects.get(name) == b"one"
    assert await objects.names() == {name}
    assert (tmp_path / "objects").stat().st_mode & 0o777 == 0o700
    await objects.delete([name, "cd" * 32])
    assert await objects.names() == set()
    with pytest.raises(CheckpointError, match="missing"):
        await objects.get(name)
    with pytest.raises(CheckpointError, match="not an object's name"):
        await objects.get("../../etc/passwd")


@pytest.mark.parametrize(
    "url",
    [
        "s3://key:secret@bucket/prefix",
        "s3://bucket/p?endpoint=x",
        "s3:///prefix",
        "file://host/path",
        "ftp://x/y",
        "store:?max=1",
        "store:?max_bytes=lots",
        "store://host",
    ],
)
async def test_a_checkpoints_url_that_is_not_one_is_refused(url: str, tmp_path: Path) -> None:
    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store:
        with pytest.raises(ConfigError):
            open_objects(url, store)


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's server on 127.0.0.1, with a bucket ``checkpoints``."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="checkpoints")
        yield endpoint
    finally:
        server.stop()


async def test_a_workspace_goes_through_s3_and_back(tmp_path: Path, s3_endpoint: str) -> None:
    provider = get_provider("local", root=tmp_path / "nodes")
    async with open_objects(
        f"s3://checkpoints/runs/one?endpoint_url={s3_endpoint}&region=us-east-1"
    ) as objects:
        async with await provider.provision() as first, await provider.provision() as second:
            await first.write_file("src/app.py", b"print(1)\n", mode=0o640)
            captured = await capture(first, objects)
            await restore(second, captured.manifest, objects)
            assert await read_all(second, "src/app.py") == b"print(1)\n"
        assert await objects.names() == {captured.name, *captured.manifest.packs()}
        listed = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").list_objects_v2(
            Bucket="checkpoints"
        )
        assert {item["Key"] for item in listed["Contents"]} == {
            f"runs/one/{name}" for name in await objects.names()
        }
        await objects.delete(await objects.names())
        assert await objects.names() == set()
        with pytest.raises(CheckpointError, match="missing"):
            await objects.get(captured.name)
