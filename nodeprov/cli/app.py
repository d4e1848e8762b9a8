"""The typer app, logging, error handling, shared options, and settings and env parsing.

Errors print one line, ``error: ...``, on stderr and exit non-zero (2 for a bad call or
configuration, 1 otherwise). Only the CLI configures logging (``-v``: info, ``-vv``: debug).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
import typer.main
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from ..errors import ConfigError, NodeprovError, leaf
from ..scripted import SCRIPTED

if TYPE_CHECKING:
    from ..store import Store

__all__ = [
    "COMMANDS",
    "SCRIPTED",
    "AgentOptionsOption",
    "JsonOption",
    "NodeOption",
    "ProviderOption",
    "RunOption",
    "SettingOption",
    "StoreOption",
    "app",
    "commands",
    "errors",
    "fail",
    "load_commands",
    "open_store",
    "parse_env",
    "parse_pair",
    "parse_settings",
    "retention",
    "summary",
]


# What each option's value is called in help, by the option's name (the same name means the same
# thing in every command); any other: its type's word (N, NUMBER, FILE), else its name.
_VALUES = {
    "setting": "KEY=VALUE",
    "option": "KEY=VALUE",
    "label": "KEY=VALUE",
    "env": "NAME[=VALUE]",
    "allow_env": "NAME",
    "allow_setting": "PROVIDER.NAME",
    "allow_option": "AGENT.NAME",
    "trusted_proxy": "CIDR",
    "store": "URL",
    "timeout": "SECONDS",
    "idle_timeout": "SECONDS",
    "agent_grace": "SECONDS",
    "probe_timeout": "SECONDS",
    "settle": "SECONDS",
    "max_age": "SECONDS",
    "wait": "SECONDS",
    "ttl": "HOURS",
    "node_ttl": "HOURS",
    "older_than": "AGE",
    "cwd": "DIR",
    "message": "TEXT",
    "reason": "TEXT",
}
_TYPES = {"int": "N", "float": "NUMBER", "Path": "FILE", "FileText": "FILE"}


class _Argument(TyperArgument):
    """An argument shown as click shows one: ``NAME``, ``[NAME]``, ``NAME...``, no Python type."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")


def _name_values(command: TyperCommand | TyperGroup) -> None:
    """Name every value in ``command``'s help as users read it, not as Python types it."""
    for param in command.params:
        name = param.name or ""
        if isinstance(param, TyperArgument):
            param.__class__ = _Argument  # typer makes its own; this one only shows itself otherwise
            param.metavar = param.metavar or name.upper()
        elif isinstance(param, TyperOption) and not (param.metavar or param.is_flag or param.count):
            param.metavar = _VALUES.get(name) or _TYPES.get(param.bare_type()) or name.upper()


class _Commands(TyperGroup):
    """Commands whose help reads at 80 columns: click's plain layout, values named by what
    they are (see :func:`_name_values`)."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if isinstance(command, TyperCommand | TyperGroup):
            _name_values(command)
        return command


# The top level's commands, in the order its help lists them: the module that defines each
# (imported when the command is called or its help asked) and its summary, said once, here.
COMMANDS: dict[str, tuple[str, str]] = {
    "agents": ("agents", "Installed agents, their models, where their CLI is."),
    "attach": ("attach", "Follow a run; take over one whose control plane died."),
    "audit": ("audit", "The HTTP API's audit trail: who did what, when."),
    "providers": ("nodes", "Installed providers and whether each is ready."),
    "provision": ("nodes", "Provision a node and print its id."),
    "list": ("nodes", "List nodes, of every installed provider or of one."),
    "exec": ("nodes", "Run a command on a node, streaming its output."),
    "cp": ("nodes", "Copy a file between this host and a node."),
    "destroy": ("nodes", "Destroy a node and everything on it."),
    "gc": ("nodes", "Remove expired nodes and those whose owner is gone."),
    "run": ("runs", "Run an agent (Claude Code, Codex, OpenCode, Gemini CLI, any ACP agent) on a new node."),
    "pause": ("runs", "Pause a run driven by another nodeprov process."),
    "logs": ("runs", "Show a run's events, from any process."),
    "runs": ("runs", "List runs, oldest first."),
    "sessions": ("runs", "List workspaces' agent sessions."),
    "status": ("runs", "Show a run and its snapshots."),
    "resume": ("resuming", "Resume a paused or failed run."),
    "fork": ("resuming", "Start a new run from a checkpoint of a run."),
    "rewind": ("resuming", "Resume a paused or failed run from an earlier checkpoint."),
    "checkpoints": ("checkpoints", "List a run's checkpoints (its workspace with its session)."),
    "checkpoint": ("checkpoints", "Checkpoint a running run now."),
    "diff": ("checkpoints", "Show what changed between two checkpoints of a run."),
    "serve": ("serve", "Serve the HTTP API."),
    "acp": ("acp", "Serve an editor over ACP: its sessions run an agent on nodes."),
    "prune": ("store", "Delete runs that are over and old."),
    "pool": ("pools", "Warm pools: nodes made before a run asks."),
    "tokens": ("tokens", "API tokens of nodeprov serve."),
}


def summary(command: str) -> str:
    """The one line the top level's help says of ``command``."""
    return COMMANDS[command][1]


def load_commands() -> None:
    """Import every command's module (each registers its commands on :data:`app`), for a
    tool that walks the whole tree (the docs, the help tests)."""
    for module, _ in COMMANDS.values():
        importlib.import_module(f"{__package__}.{module}")


class _TopLevel(_Commands):
    """The top level: a command's module is imported when the command is called or its help
    asked, so ``nodeprov --help`` and each command import only what they use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"{__package__}.{COMMANDS[cmd_name][0]}")
            self.commands.update(typer.main.get_group(app).commands)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, text) for name, (_, text) in COMMANDS.items()])


def commands(group: type[_Commands] = _Commands, **settings: Any) -> typer.Typer:
    """A typer app (or sub-app) of nodeprov's commands."""
    return typer.Typer(cls=group, add_completion=False, rich_markup_mode=None, **settings)


app = commands(
    _TopLevel,
    name="nodeprov",
    no_args_is_help=True,
    help="Provision nodes for AI coding agents (Claude Code, Codex, OpenCode, Gemini CLI, any ACP agent) "
    "and run them there: over the platform's own exec channel, paused and resumed, kept across dropped "
    "connections.",
)


@app.callback()
def _setup(
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="Log more: -v info, -vv debug.")
    ] = 0,
) -> None:
    from rich.logging import RichHandler  # not needed for --help

    from .render import err

    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        level=level, format="%(message)s", handlers=[RichHandler(console=err, show_path=False)]
    )
    # The SDK logs the failures this CLI reports itself; show them only when asked.
    logging.getLogger("claude_agent_sdk").setLevel(level if verbose else logging.CRITICAL)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``message`` (plain text: never read as markup) as the one error line; exit ``code``."""
    from rich.markup import escape

    from .render import err

    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


def _invalid(error: BaseException) -> Any:
    """``error`` if it is pydantic's ValidationError, else None. Only a command that loaded
    pydantic can raise one; ``--help`` and the light commands never load it."""
    pydantic = sys.modules.get("pydantic")
    return error if pydantic is not None and isinstance(error, pydantic.ValidationError) else None


def _one_line(error: BaseException) -> str:
    if (invalid := _invalid(error)) is not None:
        return "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
            for e in invalid.errors(include_url=False)
        )
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _is_sdk_error(error: BaseException) -> bool:
    # Only a command that imported the SDK can raise its errors; the others never import it,
    # and one may be importing it still, in a thread (its module not yet complete).
    sdk_error = getattr(sys.modules.get("claude_agent_sdk"), "ClaudeSDKError", None)
    return isinstance(sdk_error, type) and isinstance(error, sdk_error)


@contextmanager
def errors() -> Iterator[None]:
    """Turn every expected failure into one line and an exit status: 2 for a bad call or
    configuration, 1 for anything else that went wrong."""
    try:
        yield
    except Exception as raised:
        error = leaf(raised)
        if isinstance(error, BrokenPipeError):  # our reader left (`| head`): end as a pipe writer does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush there
            raise typer.Exit(128 + signal.SIGPIPE) from None
        if isinstance(error, ConfigError) or _invalid(error) is not None:
            fail(_one_line(error), 2)
        if isinstance(error, NodeprovError) or _is_sdk_error(error):
            fail(_one_line(error))
        raise


async def open_store(url: str | None) -> Store:
    """The store at ``url`` (the default file when None), tried again for
    ``NODEPROV_STORE_RETRY`` seconds (60 by default) when it becomes unavailable once open.

    Raises:
        ConfigError: NODEPROV_STORE_RETRY is not an age.
        StoreError: as :meth:`Store.open`.
    """
    from ..runs.retention import parse_age
    from ..store import Store

    retry_for = os.environ.get("NODEPROV_STORE_RETRY")
    if retry_for is None:
        return await Store.open(url)
    return await Store.open(url, retry_for=parse_age(retry_for))


def retention() -> float | None:
    """``NODEPROV_RETENTION``: how long runs that are over stay in the store (``30d`` by
    default); ``never`` keeps everything.

    Raises:
        ConfigError: it is neither an age nor ``never``.
    """
    from ..runs.retention import DEFAULT_RETENTION, parse_age

    given = os.environ.get("NODEPROV_RETENTION")
    if given is None:
        return DEFAULT_RETENTION
    return None if given.strip() == "never" else parse_age(given)


def checkpoints() -> str | None:
    """``NODEPROV_CHECKPOINTS``: where runs' checkpoints are kept (``file:///PATH``,
    ``s3://BUCKET/PREFIX``, ``store:``); unset, beside a SQLite store's file, or in a
    PostgreSQL store itself."""
    return os.environ.get("NODEPROV_CHECKPOINTS") or None


def parse_pair(item: str, option: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"{option} takes KEY=VALUE, got {item!r}")
    return key, value


def parse_settings(items: list[str] | None, option: str = "--setting") -> dict[str, Any]:
    """KEY=VALUE pairs, each VALUE as JSON when it parses; '-' in keys becomes '_'."""
    settings: dict[str, Any] = {}
    for item in items or []:
        key, raw = parse_pair(item, option)
        try:
            settings[key.replace("-", "_")] = json.loads(raw)
        except ValueError:
            settings[key.replace("-", "_")] = raw
    return settings


def parse_env(items: list[str] | None) -> dict[str, str]:
    env = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if sep:
            env[name] = value
        elif name in os.environ:
            env[name] = os.environ[name]
        else:
            raise ConfigError(f"--env {name}: no such variable in this environment")
    return env


StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="NODEPROV_STORE",
        help="Store URL (sqlite:///PATH or postgresql://...); "
        "default: the SQLite file under your state directory.",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Machine-readable output, one JSON object per line.")
]
SettingOption = Annotated[
    list[str] | None,
    typer.Option("--setting", "-s", help="Provider setting KEY=VALUE (VALUE as JSON when it parses)."),
]
AgentOptionsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--option", "-o", help="Agent option KEY=VALUE (VALUE as JSON when it parses), e.g. cli_path=..."
    ),
]
ProviderOption = Annotated[str | None, typer.Option("--provider", "-p", help="Provider name (default: all).")]
RunOption = Annotated[str, typer.Argument(metavar="RUN", help="Run id.")]
NodeOption = Annotated[str, typer.Argument(metavar="NODE", help="Node id.")]
