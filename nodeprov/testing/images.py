"""Images for tests of prompts with images."""

from __future__ import annotations

import struct
import zlib

__all__ = ["sample_png"]


def sample_png(width: int = 3, height: int = 2, seed: int = 1) -> bytes:
    """A valid RGB PNG of ``width`` by ``height`` pixels whose bytes depend on ``seed``: a
    model request that carries it must carry these bytes exactly."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + bytes((x * seed + y) % 256 for x in range(width * 3)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunks = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks
