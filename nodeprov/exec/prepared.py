"""A spawn's channel opened ahead of its command (see
:meth:`~nodeprov.node.NodeHandle.prepare`): the request a :data:`~nodeprov.exec.PREPARED_PREAMBLE`
reads, the exchange that starts it, and :class:`PreparedChannel`, a provider's
:class:`~nodeprov.spawn.PreparedSpawn` over any channel the kit's preambles run on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio

from ..spawn import PreparedSpawn, SpawnedProcess, SpawnOptions
from .demux import STDOUT, Demux
from .preamble import REPORT_READY, environment_block
from .shell import encode_arguments

__all__ = ["PreparedChannel", "prepared_request", "start_prepared"]

_REPORT_LIMIT = 4096  # bytes of the line that says the request was read
_READY_TIME = 5.0  # seconds a prepared preamble may take to say it read its request


def prepared_request(
    cwd: str, record: str, argv: Sequence[str], env: Mapping[str, str], *, relay: bool
) -> bytes | None:
    """What a :data:`~nodeprov.exec.PREPARED_PREAMBLE` reads to start ``argv`` in ``cwd`` with
    exactly ``env``; ``relay``: through the stdin relay, as
    :data:`~nodeprov.exec.RELAYED_PREAMBLE`; ``record``: as :data:`~nodeprov.exec.PREAMBLE`'s.
    ``None`` when the cwd or the record cannot go on one line (a line break, or not UTF-8),
    for a spawn the usual way."""
    if "\n" in cwd or "\n" in record:
        return None
    parameters = [cwd, record, *encode_arguments(argv, lines=True)]
    try:
        lines = "".join(f"{parameter}\n" for parameter in parameters).encode()
    except UnicodeEncodeError:
        return None
    return f"{len(parameters)} {'1' if relay else ''}\n".encode() + lines + environment_block(env)


async def start_prepared(output: Demux, send: Callable[[bytes], Awaitable[None]], request: bytes) -> bool:
    """Send a :data:`~nodeprov.exec.PREPARED_PREAMBLE` its ``request`` (see :func:`prepared_request`) with
    ``send``, and once it says it read it whole, the line that starts it. Whether it now
    starts the command (its report comes next on ``output``'s stdout:
    :func:`~nodeprov.exec.read_report`);
    ``False`` when the channel ended, broke or stayed silent before that: then nothing ran,
    and the caller closes the channel and spawns the usual way."""
    said = b""
    try:
        await send(request)
        with anyio.move_on_after(_READY_TIME):
            while b"\n" not in said and len(said) < _REPORT_LIMIT:
                said += await output.receive(STDOUT, _REPORT_LIMIT)
        line, _, rest = said.partition(b"\n")
        if line != REPORT_READY:
            return False
        output.push_back(STDOUT, rest)
        await send(b"\n")
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        return False
    return True


class PreparedChannel(PreparedSpawn):
    """A channel running :data:`~nodeprov.exec.PREPARED_PREAMBLE`: ``output`` its stdout and
    stderr, ``send`` its stdin. :meth:`start` sends ``request(options)`` (``None``: the
    channel cannot take them) and, once the preamble starts, hands the channel to
    ``started``, which reads the report (:func:`~nodeprov.exec.read_report`) and returns the
    process, bounded by its own deadline."""

    def __init__(
        self,
        output: Demux,
        send: Callable[[bytes], Awaitable[None]],
        *,
        request: Callable[[SpawnOptions], bytes | None],
        started: Callable[[SpawnOptions], Awaitable[SpawnedProcess]],
    ) -> None:
        self._output = output
        self._send = send
        self._request = request
        self._started = started

    async def start(self, options: SpawnOptions) -> SpawnedProcess | None:
        request = self._request(options)
        process: SpawnedProcess | None = None
        with anyio.CancelScope(shield=True):  # bounded instead, as a spawn is
            if request is not None and await start_prepared(self._output, self._send, request):
                try:
                    process = await self._started(options)
                except BaseException:
                    await self.aclose()
                    raise
            else:
                await self.aclose()
        return process

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await self._output.aclose()
