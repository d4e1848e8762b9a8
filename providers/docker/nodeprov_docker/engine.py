"""Calls to the Docker engine through the docker SDK, each in a worker thread, with its
errors mapped into nodeprov's tree: docker and requests exceptions never leave this package."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import docker
import docker.errors
from anyio.abc import SocketStream

from nodeprov.errors import NodeGoneError, ProviderError

__all__ = ["ConflictError", "ask", "call_engine", "engine", "hijack"]

T = TypeVar("T")


async def engine(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a docker SDK call that makes something (a container, an exec) in a worker thread.

    A cancelled call is waited for: a create that completed after its rollback ran would
    leave a container behind. Errors are mapped as by :func:`call_engine`.
    """
    return await call_engine(functools.partial(call, *args, **kwargs), abandon=False)


async def ask(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a docker SDK call that reads or removes in a worker thread; a cancelled call is
    abandoned, not waited for, so deadlines (destroy's, a shutdown's) hold even when the
    engine does not answer. Its late completion is harmless."""
    return await call_engine(functools.partial(call, *args, **kwargs), abandon=True)


async def call_engine(call: Callable[[], T], *, abandon: bool) -> T:
    """``call`` in a worker thread, its errors mapped into nodeprov's tree.

    ``NotFound`` (container or exec) becomes :class:`NodeGoneError`, a 409 :class:`ConflictError`
    (the container is not running, or is being removed), anything else a
    :class:`ProviderError`. Callers refine these where they know more.
    """
    try:
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=abandon)
    except docker.errors.NotFound as error:
        raise NodeGoneError(_explain(error)) from None
    except docker.errors.APIError as error:
        if error.status_code == 409:
            raise ConflictError(f"Docker engine: {_explain(error)}") from None
        raise ProviderError(f"Docker engine: {_explain(error)}") from None
    except (docker.errors.DockerException, OSError) as error:
        raise ProviderError(f"Docker engine not reachable: {error}") from None


def _explain(error: docker.errors.APIError) -> str:
    return str(error.explanation or error)


class ConflictError(ProviderError):
    """The engine answered 409: the container is not running, or already being removed."""


async def hijack(call: Callable[..., Any], *args: Any, **kwargs: Any) -> SocketStream:
    """The raw socket of a hijacked Engine API connection, driven by the event loop."""
    hijacked = await engine(call, *args, **kwargs)
    raw = getattr(hijacked, "_sock", hijacked)
    try:
        # Our own descriptor, so that the SDK's response object may close its one.
        return await SocketStream.from_socket(raw.dup())
    finally:
        hijacked.close()
