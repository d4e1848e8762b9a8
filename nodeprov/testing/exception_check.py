"""A check that nothing but :class:`~nodeprov.errors.NodeprovError` escapes the public API.

:func:`watch_public_api` wraps every public coroutine method and async context manager of
the library's public classes (nodes, providers, processes, the store, the orchestrator and
its runs, the SDK bridge) for the duration of a test. An exception that leaves the
outermost wrapped call is a violation unless it is a ``NodeprovError``, a cancellation, the
end of an iteration or of a byte stream (``StopAsyncIteration``, ``anyio.EndOfStream``), or
raised by the caller's own code (a data stream the caller handed in that fails). The test
suites use it as an autouse fixture that fails the test naming each violation.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import inspect
import pkgutil
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from ..errors import NodeprovError

__all__ = ["PUBLIC_MODULES", "watch_public_api"]

PUBLIC_MODULES = (
    "nodeprov.node",
    "nodeprov.exec",
    "nodeprov.spawn",
    "nodeprov.agents.claude",
    "nodeprov.agents.codex",
    "nodeprov.store",
    "nodeprov.runs",
    "nodeprov.testing.fake_provider",
    "nodeprov_local.provider",
    "nodeprov_docker.provider",
    "nodeprov_docker.exec",
)
"""Modules (and packages, with their public submodules) whose public classes make the public
API (provider modules that are not installed are left out)."""

_LIBRARY_ROOTS = tuple(
    str(Path(module.__file__).resolve().parent)
    for module in (importlib.import_module("nodeprov"),)
    if module.__file__ is not None
)
_CONFORMANCE = str(Path(__file__).resolve().with_name("conformance")) + "/"
_inside = contextvars.ContextVar("nodeprov_api_call", default=False)


def _raised_by_library(error: BaseException) -> bool:
    """Whether the innermost frame that raised ``error`` is library or third-party code,
    not the caller's (a test's generator handed to the library)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return True
    innermost = str(Path(frames[-1].filename).resolve())
    if innermost.startswith(_CONFORMANCE):  # the suites are callers too
        return False
    return innermost.startswith(_LIBRARY_ROOTS) or "site-packages" in innermost or "/lib/python" in innermost


def _allowed(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_allowed(inner) for inner in error.exceptions)
    return isinstance(
        error,
        NodeprovError
        | anyio.get_cancelled_exc_class()
        | KeyboardInterrupt
        | SystemExit
        | GeneratorExit
        | StopAsyncIteration
        | anyio.EndOfStream,  # how an anyio byte stream's receive says it has ended
    ) or not _raised_by_library(error)


def _modules(name: str) -> Iterator[ModuleType]:
    """The module ``name`` and, for a package, its public submodules (where the package's
    classes are defined)."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return
    yield module
    for found in pkgutil.iter_modules(getattr(module, "__path__", ()), f"{name}."):
        if not found.name.rpartition(".")[2].startswith("_"):
            yield from _modules(found.name)


def _public_methods(module_name: str) -> Iterator[tuple[type, str, Any]]:
    for module in _modules(module_name):
        yield from _module_methods(module)


def _module_methods(module: ModuleType) -> Iterator[tuple[type, str, Any]]:
    for cls in vars(module).values():
        if not inspect.isclass(cls) or cls.__module__ != module.__name__ or issubclass(cls, BaseException):
            continue
        for name, member in vars(cls).items():
            if name.startswith("_") and name not in ("__aenter__", "__aexit__"):
                continue
            if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(
                getattr(member, "__wrapped__", member)
            ):
                yield cls, name, member


@contextmanager
def watch_public_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Wrap the public API (see the module doc) while the block runs; yields the list that
    collects violations, one line each."""
    violations: list[str] = []

    def record(where: str, error: BaseException) -> None:
        if not _allowed(error):
            violations.append(f"{where} raised {type(error).__name__}: {error}")

    @contextmanager
    def outermost(where: str, *, mark: bool = True) -> Iterator[None]:
        """Record what leaves the outermost public call; calls made inside it are its own.
        Generators and context managers do not ``mark``: a context variable set across
        their ``yield`` would leak into the caller."""
        if _inside.get():
            yield
            return
        token = _inside.set(True) if mark else None
        try:
            yield
        except BaseException as error:
            record(where, error)
            raise
        finally:
            if token is not None:
                _inside.reset(token)

    def wrap(where: str, method: Any) -> Any:
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def call(*args: Any, **kwargs: Any) -> Any:
                with outermost(where):
                    return await method(*args, **kwargs)

            return call
        if inspect.isasyncgenfunction(method):

            @functools.wraps(method)
            async def generate(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                with outermost(where, mark=False):
                    async for item in method(*args, **kwargs):
                        yield item

            return generate

        @functools.wraps(method)
        @asynccontextmanager
        async def manage(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            with outermost(where, mark=False):
                async with method(*args, **kwargs) as value:
                    yield value

        return manage

    for module_name in PUBLIC_MODULES:
        for cls, name, member in list(_public_methods(module_name)):
            monkeypatch.setattr(cls, name, wrap(f"{cls.__name__}.{name}", member))
    yield violations


def exception_check_fixture() -> Callable[..., Iterator[None]]:
    """An autouse fixture for a ``conftest.py``: fails the test on any violation (tests
    marked ``foreign_exceptions`` are exempt)."""

    @pytest.fixture(autouse=True)
    def check_public_api_exceptions(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[None]:
        if request.node.get_closest_marker("foreign_exceptions"):
            yield
            return
        with watch_public_api(monkeypatch) as violations:
            yield
        if violations:
            pytest.fail("non-nodeprov exceptions escaped the public API:\n" + "\n".join(violations))

    return check_public_api_exceptions
