"""SSH provider benchmarks against OpenSSH's own client, on the same sshd (the tests' real
sshd on 127.0.0.1, logged in as the unprivileged test user).

- pipe: bytes through ``cat`` on the host, via a spawned SSH process (asyncssh, nodeprov's
  session and preamble) against ``ssh host cat`` (OpenSSH's client, a child process), with
  its default cipher (ChaCha20-Poly1305) and with the AES-GCM nodeprov prefers. The
  client's login is part of its time; nodeprov's connection is made before, as a node's is
  shared by its spawns: with the default 512 MiB, the login is a few percent of the run.

Needs root (sshd) and openssh-server (``scripts/engines.sh`` installs it).
"""

from __future__ import annotations

import argparse
import functools

from integration.sshd import UNPRIVILEGED, running_sshd
from nodeprov import get_provider

from .common import CHUNK, Row, compare
from .foundation import pipe_ours, pipe_raw


async def run(args: argparse.Namespace) -> list[Row]:
    total = args.pipe_mb * 1024 * 1024 // CHUNK * CHUNK
    mb = total / 1e6
    rows = []
    with running_sshd() as sshd:
        client = [*sshd.client(UNPRIVILEGED), "cat"]
        settings = sshd.settings(UNPRIVILEGED, root=".nodeprov/bench")
        async with get_provider("ssh", **settings) as provider, await provider.provision() as node:
            await pipe_ours(node, CHUNK)  # the shared connection, made outside the timing
            aes = [*client[:-2], "-c", "aes256-gcm@openssh.com", *client[-2:]]
            for name, raw in (("`ssh host cat`", client), ("`ssh -c aes256-gcm@openssh.com host cat`", aes)):
                timing = await compare(
                    args.repeat,
                    functools.partial(pipe_ours, node, total),
                    functools.partial(pipe_raw, raw, total),
                )
                rows.append(
                    Row(
                        f"ssh pipe: {args.pipe_mb} MiB through cat vs {name}",
                        f"{mb / timing.ours:,.0f} MB/s",
                        f"{mb / timing.raw:,.0f} MB/s",
                        timing,
                        0.95,
                    )
                )
    return rows
