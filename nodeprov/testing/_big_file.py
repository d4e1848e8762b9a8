"""Child process of the conformance suite's big-file test: write a large file to a node and
read it back, streaming, and report both hashes and this process's peak memory.

Reads ``{"provider", "settings", "node_id", "mib"}`` as JSON on stdin (settings may hold
secrets: never arguments) and prints ``{"written", "read", "peak_rss_mib", "warm_rss_mib"}``:
the peak resident memory after the round trip, and before it, once the provider's client
and connection were made (a small file written and read back).
"""

from __future__ import annotations

import hashlib
import json
import resource
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio

from nodeprov.registry import get_provider

_CHUNK = 1024 * 1024


async def _round_trip(request: dict[str, Any]) -> dict[str, Any]:
    node = await get_provider(request["provider"], **request["settings"]).attach(request["node_id"])
    await node.write_file("nodeprov-warm-up", b"x")
    async with node.read_file("nodeprov-warm-up") as chunks:
        async for _ in chunks:
            pass
    warm_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    written, read = hashlib.sha256(), hashlib.sha256()

    async def content() -> AsyncIterator[bytes]:
        block = bytes(range(256)) * (_CHUNK // 256)
        for index in range(request["mib"]):
            chunk = index.to_bytes(8, "big") + block[8:]  # every MiB different
            written.update(chunk)
            yield chunk

    await node.write_file("nodeprov-big-file", content())
    async with node.read_file("nodeprov-big-file") as chunks:
        async for chunk in chunks:
            read.update(chunk)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "written": written.hexdigest(),
        "read": read.hexdigest(),
        "peak_rss_mib": peak_kib // 1024,
        "warm_rss_mib": warm_kib // 1024,
    }


if __name__ == "__main__":
    print(json.dumps(anyio.run(_round_trip, json.load(sys.stdin))))
