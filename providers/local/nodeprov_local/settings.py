"""The local provider's settings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from nodeprov.node import ProviderSettings

__all__ = ["DEFAULT_PATH", "LocalSettings"]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _default_root() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "nodeprov"
    return Path.home() / ".local" / "state" / "nodeprov"


class LocalSettings(ProviderSettings):
    """Settings of the local provider."""

    # Not the root, the PATH or the environment inherited: the service's own host.
    caller_settings: ClassVar[frozenset[str]] = frozenset({"eof_grace", "term_grace"})

    root: Path = Field(
        default_factory=_default_root,
        description="Directory under which each node gets its own directory; default: "
        "$XDG_RUNTIME_DIR/nodeprov when XDG_RUNTIME_DIR is an absolute, existing directory, else "
        "~/.local/state/nodeprov. Created with mode 0700 (missing parents too). Refused unless it "
        "is a real directory (not a symlink) owned by this user and writable by no group or "
        "other user: whoever can write to it can make this user delete files or kill processes.",
    )
    path: str = Field(
        default=DEFAULT_PATH,
        description="PATH of every process, unless the node config or the spawn sets one. "
        "The control plane's own PATH is not used.",
    )
    inherit_env: list[str] = Field(
        default_factory=list,
        description="Names of control-plane environment variables to pass to every process "
        "on the node. Nothing is inherited unless named here.",
    )
    eof_grace: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a stopped process gets to exit after stdin is closed, before SIGTERM.",
    )
    term_grace: float = Field(
        default=5.0,
        ge=0,
        description="Seconds after SIGTERM before SIGKILL, when a process is stopped and when "
        "the control plane dies (its processes then get SIGTERM from their supervisor).",
    )
