"""Where checkpoints' packs and manifests live: an object store, named by URL like the store
(``file:///var/lib/nodeprov/checkpoints``, ``s3://bucket/prefix``). Objects are written once
under their content's digest, so writing one again is harmless and two checkpoints share what
they have in common."""

from __future__ import annotations

import hashlib
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import anyio.to_thread

from ..errors import CheckpointError, ConfigError
from ..store import CheckpointStore, Store

__all__ = [
    "STORE_MAX_BYTES",
    "DirectoryObjects",
    "ObjectStore",
    "StoreObjects",
    "digest_of",
    "location",
    "open_objects",
]


def digest_of(data: bytes) -> str:
    """The name of ``data`` in an object store: its SHA-256, in hex."""
    return hashlib.sha256(data).hexdigest()


class ObjectStore(ABC):
    """Objects by name, each written whole or not at all. An async context manager that
    closes itself."""

    url: str
    """Where the objects live, as given (credentials never appear in it)."""

    @abstractmethod
    async def put(self, name: str, data: bytes | bytearray) -> None:
        """Store ``data`` under ``name`` (its digest): durable once this returns; the same
        object put again is left as it is.

        Raises:
            CheckpointError: it could not be written (nothing is left under ``name``).
        """

    @abstractmethod
    async def get(self, name: str) -> bytes:
        """The object ``name``.

        Raises:
            CheckpointError: there is no such object, or it could not be read.
        """

    @abstractmethod
    async def names(self, *, older_than: float = 0.0) -> set[str]:
        """The names of the objects stored at least ``older_than`` seconds ago (retention
        leaves younger ones to the captures that may be writing them).

        Raises:
            CheckpointError: they could not be listed.
        """

    @abstractmethod
    async def delete(self, names: Iterable[str]) -> None:
        """Delete the objects ``names``; those absent already are no error.

        Raises:
            CheckpointError: some could not be deleted.
        """

    async def aclose(self) -> None:  # noqa: B027 - most stores hold nothing to close
        """Release what the store holds open; idempotent."""

    async def __aenter__(self) -> ObjectStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.aclose()


class DirectoryObjects(ObjectStore):
    """Objects as files in a directory of this machine (``file:///PATH``): ``PATH/ab/abcd...``,
    each written beside its name, synced, then renamed, so a crash leaves it whole or absent.
    The directory is made ``0700``: checkpoints hold the workspaces' files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.as_uri()

    def _path(self, name: str) -> Path:
        if len(name) != 64 or not all(c in "0123456789abcdef" for c in name):
            raise CheckpointError(f"{name!r} is not an object's name")
        return self.root / name[:2] / name

    async def put(self, name: str, data: bytes | bytearray) -> None:
        await anyio.to_thread.run_sync(self._put, self._path(name), data)

    @staticmethod
    def _put(path: Path, data: bytes | bytearray) -> None:
        if path.exists():
            return
        partial = path.with_name(f"{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
        try:
            path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.parent.mkdir(mode=0o700, exist_ok=True)
            with open(partial, "xb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, path)
            directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as error:
            partial.unlink(missing_ok=True)
            raise CheckpointError(
                f"could not write object {path.name} under {path.parent}: {error}"
            ) from None

    async def get(self, name: str) -> bytes:
        path = self._path(name)
        try:
            return await anyio.Path(path).read_bytes()
        except FileNotFoundError:
            raise CheckpointError(f"object {name} is missing from {self.url}") from None
        except OSError as error:
            raise CheckpointError(f"could not read object {name} from {self.url}: {error}") from None

    async def names(self, *, older_than: float = 0.0) -> set[str]:
        return await anyio.to_thread.run_sync(self._names, time.time() - older_than)

    def _names(self, before: float) -> set[str]:
        try:
            return {
                path.name
                for directory in self.root.iterdir()
                if len(directory.name) == 2
                for path in directory.iterdir()
                if len(path.name) == 64 and path.stat().st_mtime <= before
            }
        except FileNotFoundError:
            return set()
        except OSError as error:
            raise CheckpointError(f"could not list {self.url}: {error}") from None

    async def delete(self, names: Iterable[str]) -> None:
        paths = [self._path(name) for name in names]

        def delete() -> None:
            for path in paths:
                try:
                    path.unlink(missing_ok=True)
                except OSError as error:
                    raise CheckpointError(f"could not delete object {path.name}: {error}") from None

        await anyio.to_thread.run_sync(delete)


STORE_MAX_BYTES = 1 << 30
"""What ``store:`` holds of checkpoint objects at most unless told (``store:?max_bytes=N``)."""


class StoreObjects(ObjectStore):
    """Objects in nodeprov's store itself (``store:``): for small workspaces, or replicas of a
    service that share nothing but their PostgreSQL store. It holds ``max_bytes`` at most, in
    all (a database is no place for a large workspace checkpointed at every pause): an
    object that would pass it is refused, its checkpoint failing with what to do instead."""

    url = "store:"

    def __init__(self, checkpoints: CheckpointStore, *, max_bytes: int = STORE_MAX_BYTES) -> None:
        self._checkpoints = checkpoints
        self._max_bytes = max_bytes

    async def put(self, name: str, data: bytes | bytearray) -> None:
        held = await self._checkpoints.object_bytes()
        if held + len(data) > self._max_bytes:
            raise CheckpointError(
                f"the store holds {held:,} bytes of checkpoints, and this one would pass its cap of "
                f"{self._max_bytes:,} (store:?max_bytes=N): keep checkpoints of large workspaces in "
                "an object store (--checkpoints s3://BUCKET/PREFIX, or file:///PATH)"
            )
        await self._checkpoints.put_object(name, bytes(data))

    async def get(self, name: str) -> bytes:
        data = await self._checkpoints.get_object(name)
        if data is None:
            raise CheckpointError(f"object {name} is missing from the store")
        return data

    async def names(self, *, older_than: float = 0.0) -> set[str]:
        return await self._checkpoints.object_names(older_than=older_than)

    async def delete(self, names: Iterable[str]) -> None:
        await self._checkpoints.delete_objects(names)


def location(url: str) -> str:
    """Where the object store at ``url`` keeps its objects: the URL less its parameters (two
    URLs that differ in them, ``?region=`` or ``?max_bytes=``, name the same objects)."""
    return url.split("?", 1)[0].split("#", 1)[0]


def open_objects(url: str, store: Store | None = None) -> ObjectStore:
    """The object store at ``url``: ``file:///ABSOLUTE/PATH``, ``s3://BUCKET[/PREFIX]`` (see
    :class:`nodeprov.checkpoints.s3.S3Objects` for its query parameters) or
    ``store:[?max_bytes=N]`` (``store`` itself, see :class:`StoreObjects`).

    Raises:
        ConfigError: the URL names no store nodeprov knows, or is malformed; ``store:``
            without a store.
    """
    parts = urlsplit(url)
    if parts.scheme == "store" and not parts.netloc and not parts.path:
        if store is None:
            raise ConfigError("checkpoints in store: need the store")
        query = parse_qs(parts.query)
        if unknown := sorted(set(query) - {"max_bytes"}):
            raise ConfigError(f"unknown store: checkpoints parameters {unknown}: max_bytes is known")
        try:
            max_bytes = int(query.get("max_bytes", [str(STORE_MAX_BYTES)])[-1])
        except ValueError:
            raise ConfigError(f"store:?max_bytes=N takes a number of bytes, not {url!r}") from None
        return StoreObjects(store.checkpoints, max_bytes=max_bytes)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ConfigError(f"a checkpoints URL file:///ABSOLUTE/PATH, not {url!r}")
        return DirectoryObjects(Path(unquote(parts.path)))
    if parts.scheme == "s3":
        from .s3 import S3Objects  # boto3 is imported only by those who store on S3

        return S3Objects.from_url(url)
    raise ConfigError(f"checkpoints go to file:///PATH or s3://BUCKET/PREFIX, not {url!r}")
