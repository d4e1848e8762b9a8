"""Run the benchmarks: ``make bench`` or ``.venv/bin/python -m bench.run [--suite ...]``.

Each benchmark runs next to the raw tool doing the same work, in the same run, and reports
nodeprov's speed ratio against it (see bench/common.py).

- foundation: a local node's pipe against ``cat`` via ``anyio.open_process``; the SDK bridge
  against the SDK's own subprocess transport.
- docker: cold provision + first byte, 20 concurrent provisions, exec pipe throughput, and
  write_file/read_file throughput, each against docker-py's low-level client in-process.
- ssh: an SSH spawn's pipe against ``ssh host cat`` on the same real sshd.
- ec2: provisioning on moto's EC2 server against boto3's same calls and ``ssh host mkdir``.
- codex: a turn of Codex JSONL events through the Codex agent (spawn, guard, conversion to
  the one message model) against a plain child process and ``json.loads``.
- acp: a prompt's turn of ``session/update`` notifications through the ACP driver (spawn,
  guard, JSON-RPC reader, conversion to the one message model) against a plain child process
  sent the same requests and ``json.loads``, per 1,000 messages; beside it, in the same
  sitting, the codex relay and the SDK bridge per 1,000 messages.
- kubernetes: a pod's exec pipe against ``kubectl exec -i POD -- cat``; provision + first byte
  against ``kubectl run`` + ``kubectl wait`` + ``kubectl exec`` (the test cluster, 1.20).
- cli: ``nodeprov run`` against the raw Claude Code CLI on the same scripted model, and kept against not;
  ``nodeprov --help`` against the interpreter's own start-up.
- opencode: ``nodeprov run --agent opencode`` against the raw ``opencode run`` on the same
  scripted model.
- checkpoints: a workspace's capture and restore on Docker against plain ``tar`` through
  ``docker exec``.

Every row prints the median speed ratio and its spread (the lowest and highest pair).
"""

from __future__ import annotations

import argparse

import anyio

from . import (
    acp_bench,
    checkpoints_bench,
    cli_bench,
    codex_bench,
    docker_bench,
    ec2_bench,
    foundation,
    kubernetes_bench,
    opencode_bench,
    ssh_bench,
)
from .common import print_rows

SUITES = {
    "foundation": foundation.run,
    "docker": docker_bench.run,
    "codex": codex_bench.run,
    "acp": acp_bench.run,
    "ssh": ssh_bench.run,
    "ec2": ec2_bench.run,
    "kubernetes": kubernetes_bench.run,
    "cli": cli_bench.run,
    "opencode": opencode_bench.run,
    "checkpoints": checkpoints_bench.run,
}


async def main(args: argparse.Namespace) -> None:
    rows = []
    for name in SUITES if args.suite == "all" else [args.suite]:
        rows += await SUITES[name](args)
    print_rows(rows, args.repeat)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", choices=["all", *SUITES], default="all")
    parser.add_argument("--pipe-mb", type=int, default=512, help="MiB pushed through cat per run")
    parser.add_argument("--messages", type=int, default=100_000, help="small messages per bridge run")
    parser.add_argument("--nodes", type=int, default=20, help="nodes provisioned at once")
    parser.add_argument("--repeat", type=int, default=9, help="pairs of runs of each")
    parser.add_argument("--workspace-mb", type=int, default=200, help="MiB of the workspace checkpointed")
    anyio.run(main, parser.parse_args())
