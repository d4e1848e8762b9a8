"""Checkpoints' objects in an S3-compatible object store (AWS S3, MinIO, Ceph...), through
boto3 in worker threads (``pip install 'nodeprov[s3]'``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import anyio.to_thread
import boto3
import botocore.config
import botocore.exceptions

from ..errors import CheckpointError, ConfigError
from .objects import ObjectStore

__all__ = ["S3Objects"]

T = TypeVar("T")
_QUERY = ("endpoint_url", "region")
_DELETE_BATCH = 1000  # S3's limit per DeleteObjects


class S3Objects(ObjectStore):
    """Objects under ``s3://BUCKET/PREFIX``. Credentials come from boto3's own chain (the
    environment, a profile, an instance's role), never from the URL. The bucket must exist.

    Query parameters: ``endpoint_url`` (an S3-compatible service's, such as MinIO's) and
    ``region``."""

    def __init__(
        self, bucket: str, prefix: str, *, endpoint_url: str | None = None, region: str | None = None
    ):
        self.bucket, self.prefix = bucket, prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}"
        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            config=botocore.config.Config(retries={"mode": "standard", "max_attempts": 5}),
        )

    @classmethod
    def from_url(cls, url: str) -> S3Objects:
        """The store ``s3://BUCKET[/PREFIX][?endpoint_url=URL&region=NAME]``.

        Raises:
            ConfigError: no bucket, credentials in the URL, or an unknown query parameter.
        """
        parts = urlsplit(url)
        if not parts.hostname or "@" in parts.netloc:
            raise ConfigError(
                f"a checkpoints URL s3://BUCKET/PREFIX (credentials from the environment), not {url!r}"
            )
        query = parse_qs(parts.query, strict_parsing=False)
        if unknown := sorted(set(query) - set(_QUERY)):
            raise ConfigError(f"unknown s3 checkpoints parameters {unknown}: {', '.join(_QUERY)} are known")
        given = {key: values[-1] for key, values in query.items()}
        return cls(
            parts.hostname, parts.path, endpoint_url=given.get("endpoint_url"), region=given.get("region")
        )

    async def _call(self, what: str, function: Callable[..., T], **arguments: Any) -> T:
        try:
            return await anyio.to_thread.run_sync(lambda: function(**arguments))
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
            raise CheckpointError(f"could not {what} in {self.url}: {error}") from None

    async def put(self, name: str, data: bytes | bytearray) -> None:
        await self._call(
            f"write object {name}",
            self._client.put_object,
            Bucket=self.bucket,
            Key=self.prefix + name,
            Body=data,
        )

    async def get(self, name: str) -> bytes:
        def get() -> bytes:
            try:
                answer = self._client.get_object(Bucket=self.bucket, Key=self.prefix + name)
            except self._client.exceptions.NoSuchKey:
                raise CheckpointError(f"object {name} is missing from {self.url}") from None
            body: bytes = answer["Body"].read()
            return body

        return await self._call(f"read object {name}", get)

    async def names(self, *, older_than: float = 0.0) -> set[str]:
        before = datetime.now(UTC) - timedelta(seconds=older_than)

        def names() -> set[str]:
            found: set[str] = set()
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                found.update(
                    item["Key"][len(self.prefix) :]
                    for item in page.get("Contents", ())
                    if item["LastModified"] <= before
                )
            return {name for name in found if "/" not in name}

        return await self._call("list objects", names)

    async def delete(self, names: Iterable[str]) -> None:
        keys = [{"Key": self.prefix + name} for name in names]
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = keys[start : start + _DELETE_BATCH]
            answer = await self._call(
                "delete objects", self._client.delete_objects, Bucket=self.bucket, Delete={"Objects": batch}
            )
            if errors := answer.get("Errors"):
                raise CheckpointError(f"could not delete {len(errors)} objects in {self.url}: {errors[0]}")

    async def aclose(self) -> None:
        self._client.close()
