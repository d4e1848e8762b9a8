"""The one exception tree of nodeprov.

Every error a caller can see from nodeprov, its providers and its SDK bridge derives from
:class:`NodeprovError`. Providers map their platform's exceptions (docker, botocore, OS
errors, ...) into this tree at their boundary, so a caller never catches a platform type.

::

    NodeprovError
    ├── ConfigError                  bad settings, options or names; fix the call
    │   ├── ProviderNotFoundError    no provider of that name is installed
    │   ├── AgentNotFoundError       no agent of that name is installed (or none takes the model)
    │   └── NodePathError            a path outside the node, empty, or with NUL
    ├── ProviderError                the platform failed or refused
    │   └── ProvisionError           a node could not be made (nothing is left behind)
    ├── NodeGoneError                the node was destroyed or vanished
    │   └── AttachTakenError         a kept process's attach was taken by another attach
    ├── NodeFileError                a file on a node could not be read or written
    │   └── NodeFileNotFoundError    the file does not exist
    ├── SpawnError                   a process could not be started on a node
    │   ├── CommandNotFoundError     the command does not exist on the node
    │   └── NodeSuspendedError       the node is suspended: wake it first
    ├── DeadlineError                a bounded operation ran out of time
    ├── AgentError                   the agent process misbehaved (SDK bridge)
    │   ├── AgentOutputError         malformed, non-UTF-8 or oversized output
    │   └── AgentExitError           the agent exited non-zero or stopped answering
    ├── StoreError                   the store's database failed or timed out
    ├── TokenError                   a resume token is unknown or used already
    ├── RunStateError                a run is not in a state that allows the call
    └── CheckpointError              a workspace could not be captured, stored or restored
        └── ArchiveRefusedError      a workspace's archive would reach outside its root
"""

from __future__ import annotations

import logging

__all__ = [
    "AgentError",
    "AgentExitError",
    "AgentNotFoundError",
    "AgentOutputError",
    "ArchiveRefusedError",
    "AttachTakenError",
    "CheckpointError",
    "CommandNotFoundError",
    "ConfigError",
    "DeadlineError",
    "NodeFileError",
    "NodeFileNotFoundError",
    "NodeGoneError",
    "NodePathError",
    "NodeSuspendedError",
    "NodeprovError",
    "ProviderError",
    "ProviderNotFoundError",
    "ProvisionError",
    "RunStateError",
    "SpawnError",
    "StoreError",
    "TokenError",
    "first_line",
    "leaf",
    "log_failure",
]


class NodeprovError(Exception):
    """Base of every error nodeprov raises."""


class ConfigError(NodeprovError, ValueError):
    """Bad settings, options, names or arguments: fix the call. Also a ``ValueError``, as
    invalid values are in Python."""


class ProviderNotFoundError(ConfigError):
    """No provider of the requested name is registered in ``nodeprov.providers``."""


class AgentNotFoundError(ConfigError):
    """No agent of that name is installed, or no installed agent takes a model that none
    claims."""


class ProviderError(NodeprovError):
    """The provider's platform failed or refused an operation."""


class ProvisionError(ProviderError):
    """A node could not be provisioned. Whatever was created on the way was removed."""


class NodeGoneError(NodeprovError):
    """The node was destroyed (by this handle or from outside) and cannot be used."""


class AttachTakenError(NodeGoneError):
    """Another control plane attached to the kept process: this one may not attach again,
    and must neither signal nor release it (it is the other's now)."""


class NodePathError(ConfigError):
    """A path on a node was refused: empty, containing NUL, or outside what the node owns
    (see :attr:`~nodeprov.NodeHandle.file_roots`)."""


class NodeFileError(NodeprovError):
    """A file on a node could not be read or written (a directory in the way, no permission,
    a full disk). The message carries what the node said."""


class NodeFileNotFoundError(NodeFileError):
    """The file to read does not exist on the node."""


class SpawnError(NodeprovError):
    """A process could not be started on a node."""


class CommandNotFoundError(SpawnError):
    """The command does not exist on the node (or is not executable there)."""


class NodeSuspendedError(SpawnError):
    """The node is suspended (see :meth:`~nodeprov.NodeHandle.suspend`): nothing runs on it
    until :meth:`~nodeprov.NodeHandle.wake`."""


class DeadlineError(NodeprovError):
    """A bounded operation (destroy, close, provision) did not finish in its time."""


class AgentError(NodeprovError):
    """The agent process on the node misbehaved."""


class AgentOutputError(AgentError):
    """The agent wrote output that is not newline-delimited UTF-8 JSON within the size cap."""


class AgentExitError(AgentError):
    """The agent process exited with a failure, or closed its output and did not exit.

    ``exit_code`` is the process's exit status (``None`` when it had to be killed), and
    ``stderr_tail`` the last lines it wrote to stderr, for diagnosis.
    """

    def __init__(self, message: str, *, exit_code: int | None, stderr_tail: str = "") -> None:
        detail = f"{message}\n--- last stderr lines ---\n{stderr_tail}" if stderr_tail else message
        super().__init__(detail)
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail


class StoreError(NodeprovError):
    """The store's database failed, refused, or did not answer within its statement timeout."""


class TokenError(NodeprovError):
    """A resume token is unknown, or was used already."""


class RunStateError(NodeprovError):
    """The run is not in a state that allows this (resuming a run that is not paused,
    pausing one that is finishing or over, another control plane got there first)."""


class CheckpointError(NodeprovError):
    """A workspace could not be captured from a node, stored, or restored onto one; or what
    a checkpoint names is missing from where its pieces live. Nothing was half recorded:
    a capture that fails stores no manifest, a restore that fails leaves the workspace as it
    was."""


class ArchiveRefusedError(CheckpointError):
    """A workspace's archive holds what would reach outside its root: an absolute path, a
    ``..``, a member written through a symbolic link, a hard link to what the archive does
    not hold, the same path twice; or it is not a tar archive at all."""


def first_line(error: BaseException | str) -> str:
    """An error's message on one line: its first, without the list of valid fields that a
    settings error appends (``" (fields: ...)"``); the error's type name when it has none."""
    text = str(error).strip()
    if not text:
        return "" if isinstance(error, str) else type(error).__name__
    return text.splitlines()[0].split(" (fields: ")[0]


def log_failure(logger: logging.Logger, error: BaseException, what: str, *args: object) -> None:
    """Log ``what`` (a %-format with ``args``) failed because of ``error``: one line for an
    error of nodeprov's own (the store away, a provider refusing: expected, and retried),
    a traceback for anything else (a bug to see)."""
    if isinstance(leaf(error), NodeprovError):
        logger.warning(f"{what}: %s", *args, first_line(leaf(error)))
    else:
        logger.error(what, *args, exc_info=error)


def leaf(error: BaseException) -> BaseException:
    """The one error inside nested single-error groups (what a task group raises)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
