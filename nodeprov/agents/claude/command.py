"""The Claude Code CLI's command line and environment, exactly as the Claude Agent SDK's own
subprocess transport would make them for the same options (with its own builder)."""

from __future__ import annotations

from dataclasses import replace

import claude_agent_sdk
from claude_agent_sdk import ClaudeAgentOptions

# Private SDK parts, pinned by the version range in pyproject.toml and covered by tests:
# the command builder keeps our argv identical to the SDK's own transport.
from claude_agent_sdk._internal._client_app import DERIVED_CLIENT_APP_ENV, EXPLICIT_CLIENT_APP_ENV
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from claude_agent_sdk.types import _configure_can_use_tool

from ...errors import ConfigError
from .sdk_parity import trace_context

__all__ = ["agent_command", "agent_environment"]

_SESSION_STATE_ENV = "CLAUDE_CODE_SDK_READS_SESSION_STATE"


def agent_command(options: ClaudeAgentOptions, cli_path: str) -> list[str]:
    """The argument vector the SDK's subprocess transport would run for ``options``.

    ``can_use_tool`` routes permission prompts over stdio, as ``query`` and
    ``ClaudeSDKClient`` arrange before building their own transport.

    Raises:
        ConfigError: the options are inconsistent (the SDK's validation message).
    """
    try:
        configured = _configure_can_use_tool(options)
        builder = SubprocessCLITransport(prompt="", options=replace(configured, cli_path=cli_path))
        return builder._build_command()
    except (ValueError, TypeError, claude_agent_sdk.ClaudeSDKError) as error:
        raise ConfigError(f"invalid agent options: {error}") from error


def agent_environment(options: ClaudeAgentOptions) -> dict[str, str]:
    """The environment the SDK gives the CLI, less the control plane's own environment."""
    env = {
        "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
        **options.env,
        "CLAUDE_AGENT_SDK_VERSION": claude_agent_sdk.__version__,
    }
    env.pop(DERIVED_CLIENT_APP_ENV, None)
    if options.client_app is not None:
        env[EXPLICIT_CLIENT_APP_ENV] = options.client_app
    if not any(key.upper() == _SESSION_STATE_ENV for key in env):
        env[_SESSION_STATE_ENV] = "1"
    if options.enable_file_checkpointing:
        env["CLAUDE_CODE_ENABLE_SDK_FILE_CHECKPOINTING"] = "true"
    if options.cwd:
        env["PWD"] = str(options.cwd)
    env.update({k: v for k, v in trace_context().items() if k not in options.env})
    return env
