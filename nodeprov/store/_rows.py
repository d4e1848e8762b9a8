"""Small helpers every part of the store shares: timestamps, ids, and records <-> rows."""

from __future__ import annotations

import secrets
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from .records import NodeRecord, NodeRecordState

__all__ = ["as_record", "columns", "insert", "marks", "new_id", "now"]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(8)}"


def as_record(cls: type[Any], row: tuple[Any, ...] | None) -> Any:
    if row is None:
        return None
    values = dict(zip([f.name for f in fields(cls)], row, strict=True))
    for name in ("node_kept", "released"):
        if name in values:
            values[name] = bool(values[name])
    if cls is NodeRecord:
        values["state"] = NodeRecordState(values["state"])
    return cls(**values)


def marks(values: tuple[Any, ...]) -> str:
    return ", ".join("?" for _ in values)


def insert(table: str, row: Any) -> tuple[str, tuple[Any, ...]]:
    """The statement and values that insert a record dataclass into ``table``."""
    values = tuple(getattr(row, f.name) for f in fields(row))
    values = tuple(int(v) if isinstance(v, bool) else v for v in values)  # INTEGER columns on both backends
    return f"INSERT INTO {table} ({columns(type(row))}) VALUES ({marks(values)})", values


def columns(cls: type[Any]) -> str:
    return ", ".join(f.name for f in fields(cls))
