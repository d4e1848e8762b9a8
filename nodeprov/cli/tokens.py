"""The ``tokens`` commands: the HTTP API's bearer tokens (``create``, ``ls``, ``revoke``);
``create --file`` adds one to a tokens file (its hash only) for ``nodeprov serve
--tokens-file``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from ..scopes import DEFAULT_TENANT, SCOPES
from .app import JsonOption, StoreOption, app, commands, errors, fail, open_store, summary
from .render import emit, err, out, print_table, when

if TYPE_CHECKING:
    from ..store import TokenRecord

__all__ = ["create", "ls", "revoke", "tokens_app"]

tokens_app = commands(
    short_help=summary("tokens"),
    name="tokens",
    no_args_is_help=True,
    help="API tokens of `nodeprov serve`: make one (its secret is shown once), list, revoke.",
)
app.add_typer(tokens_app)


@tokens_app.command(short_help="Make an API token; its secret is shown once.")
def create(  # noqa: PLR0917 - one parameter per command-line option
    name: Annotated[str, typer.Argument(help="What the token is for (a person, a CI job).")],
    scope: Annotated[
        list[str] | None,
        typer.Option(help=f"What the token may do: {', '.join(SCOPES)}. Repeatable; at least one."),
    ] = None,
    tenant: Annotated[
        str,
        typer.Option(
            help="The tenant (a team, a project) the token acts for: it reaches that tenant's runs, "
            "nodes and pools alone (admin: every tenant's)."
        ),
    ] = DEFAULT_TENANT,
    store: StoreOption = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="Add the token to this tokens file (its hash only; made if missing) instead of the "
            "store, for `nodeprov serve --tokens-file` (e.g. from a Kubernetes Secret).",
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Make a token and print its secret, this once: only its hash is kept."""

    async def make() -> tuple[TokenRecord, str]:
        async with await open_store(store) as opened:
            return await opened.tokens.create(name, scope or (), tenant)

    with errors():
        if file is not None:
            from ..store import add_to_tokens_file  # not for --help

            entry, secret = add_to_tokens_file(file, name, scope or (), tenant)
            made = {
                "name": entry.name,
                "scopes": list(entry.scopes),
                "tenant": entry.tenant,
                "file": str(file),
            }
            said = f"token {entry.name!r} ({_described(entry.scopes, entry.tenant)}) added to {file}"
        else:
            record, secret = anyio.run(make)
            made = {
                "id": record.id,
                "name": record.name,
                "scopes": list(record.scopes),
                "tenant": record.tenant,
            }
            said = f"token {record.id} ({_described(record.scopes, record.tenant)})"
    if json_output:
        emit(made | {"token": secret})
        return
    err.print(f"{said}: its secret is shown this once, keep it now", soft_wrap=True, markup=False)
    out.print(secret, soft_wrap=True, markup=False)


def _described(scopes: tuple[str, ...], tenant: str) -> str:
    return ", ".join(scopes) + (f"; tenant {tenant}" if tenant != DEFAULT_TENANT else "")


@tokens_app.command(short_help="List API tokens.")
def ls(store: StoreOption = None, json_output: JsonOption = False) -> None:
    """List tokens, revoked ones too, oldest first (never a secret)."""

    async def load() -> list[TokenRecord]:
        async with await open_store(store) as opened:
            return await opened.tokens.tokens()

    with errors():
        records = anyio.run(load)
    if json_output:
        for record in records:
            emit(dataclasses.asdict(record) | {"scopes": list(record.scopes)})
        return
    print_table(
        ["token", "name", "tenant", "scopes", "created", "revoked"],
        [
            [
                record.id,
                record.name,
                record.tenant,
                " ".join(record.scopes),
                when(record.created_at),
                when(record.revoked_at or ""),
            ]
            for record in records
        ],
        ids=("token",),
    )


@tokens_app.command(short_help="Revoke an API token.")
def revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="Token id (tok-...).")],
    store: StoreOption = None,
) -> None:
    """Revoke a token for good: it is refused from now on."""

    async def revoke_it() -> str:
        async with await open_store(store) as opened:
            if await opened.tokens.revoke(token_id):
                return f"revoked {token_id}"
            if any(record.id == token_id for record in await opened.tokens.tokens()):
                return f"{token_id} was revoked already"
        fail(f"no such token {token_id}")

    with errors():
        said = anyio.run(revoke_it)
    out.print(said, soft_wrap=True, markup=False)
