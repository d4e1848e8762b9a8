"""The service's one table from the library's errors to HTTP statuses (README "Errors")."""

from __future__ import annotations

import pytest

from nodeprov import errors
from nodeprov.service.problems import status_of


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (errors.NodePathError("x"), 400, "bad_path"),
        (errors.NodeFileNotFoundError("x"), 404, "file_not_found"),
        (errors.NodeGoneError("x"), 404, "node_not_found"),
        (errors.CommandNotFoundError("x"), 422, "command_not_found"),
        (errors.RunStateError("x"), 409, "run_state"),
        (errors.TokenError("x"), 409, "token_used"),
        (errors.ConfigError("x"), 422, "invalid"),
        (errors.ProviderNotFoundError("x"), 422, "invalid"),
        (errors.AgentNotFoundError("x"), 422, "invalid"),
        (errors.ProviderError("x"), 502, "provider_failed"),
        (errors.ProvisionError("x"), 502, "provider_failed"),
        (errors.StoreError("x"), 503, "store_unavailable"),
        (errors.DeadlineError("x"), 504, "deadline"),
        (errors.AgentError("x"), 500, "internal"),
    ],
)
def test_each_error_has_its_status(error: errors.NodeprovError, status: int, code: str) -> None:
    assert status_of(error) == (status, code)
