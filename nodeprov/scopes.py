"""What an API token may do, and whose: names the store keeps and the CLI's help shows, apart
so that ``nodeprov --help`` loads no store."""

from __future__ import annotations

__all__ = ["DEFAULT_TENANT", "SCOPES"]

SCOPES: tuple[str, ...] = ("read", "runs", "nodes", "admin")
"""What a token may be given leave to do (the HTTP API decides what each scope allows)."""

DEFAULT_TENANT = "default"
"""The tenant of what the library and the CLI make, and of a token given none."""
