"""What a caller may bend, and what stays the operator's (``nodeprov serve``): a request's
provider settings, agent options and agent environment, checked before anything is made.

- **Settings**: those its provider declares a caller's (:attr:`ProviderSettings.caller_settings`:
  what shapes the node alone), and those the operator allows (``--allow-setting
  PROVIDER.NAME``). Every other one (an endpoint, a host, a credential, a path of the
  service's machine, a policy of trust, what costs money) is the operator's: the service's
  own settings (``NODEPROV_<PROVIDER>_*``, its secrets) go only where the operator pointed them.
- **Options**: those its agent declares a caller's (:attr:`AgentOptions.caller_options`), and
  those allowed (``--allow-option AGENT.NAME``): never, unless allowed, what runs as the
  agent (``cli_path``), beside it (MCP servers) or where its model traffic goes.
- **Environment** of an agent: any name but those that reroute its traffic or load code into
  it (``*_BASE_URL``, proxies, CA bundles, ``LD_PRELOAD``, ``NODE_OPTIONS``, ...), unless
  allowed (``--allow-env NAME``).

A refusal is 422 and names the field, never its value.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from ..agents.registry import agent_class
from ..registry import provider_class
from .problems import ServiceError

__all__ = ["check_env", "check_options", "check_settings"]

_REROUTING = re.compile(
    r"(.*_BASE_URL|.*_API_BASE|.*_ENDPOINT|.*_PROXY|ALL_PROXY|NODE_EXTRA_CA_CERTS|SSL_CERT_FILE|SSL_CERT_DIR"
    r"|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|LD_PRELOAD|LD_LIBRARY_PATH|NODE_OPTIONS|PYTHONSTARTUP|BASH_ENV|ENV)",
    re.IGNORECASE,
)


def check_settings(provider: str, given: Mapping[str, Any], allowed: Collection[str]) -> None:
    """Raises ServiceError (422) for a setting of ``provider`` a caller may not give."""
    mine = provider_class(provider).settings_model.caller_settings
    _refuse_the_operators("setting", "provider", provider, given, mine=mine, allowed=allowed)


def check_options(agent: str, given: Mapping[str, Any], allowed: Collection[str]) -> None:
    """Raises ServiceError (422) for an option of ``agent`` a caller may not give."""
    mine = agent_class(agent).options_model.caller_options
    _refuse_the_operators("option", "agent", agent, given, mine=mine, allowed=allowed)


def _refuse_the_operators(
    field: str,
    kind: str,
    owner: str,
    given: Mapping[str, Any],
    *,
    mine: Collection[str],
    allowed: Collection[str],
) -> None:
    """Raises ServiceError (422) for the first name of ``given`` neither ``mine`` (the
    caller's by declaration) nor ``allowed`` (``OWNER.NAME``, the operator's allowance)."""
    for name in given:
        if name not in mine and f"{owner}.{name}" not in allowed:
            raise ServiceError(
                422,
                "invalid",
                f"{field} {name!r} of {kind} {owner} is the operator's"
                f" (nodeprov serve --allow-{field} {owner}.{name})",
            )


def check_env(env: Mapping[str, str], allowed: Collection[str]) -> None:
    """Raises ServiceError (422) for an agent's environment variable that would reroute it."""
    for name in env:
        if _REROUTING.fullmatch(name) and name not in allowed:
            raise ServiceError(
                422,
                "invalid",
                f"environment variable {name} would reroute the agent: the operator's"
                f" (nodeprov serve --allow-env {name})",
            )
