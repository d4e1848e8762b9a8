"""MkDocs hooks: pages made from the code at build time, so they cannot drift from it.

- ``<!-- nodeprov:cli -->`` becomes every command's ``--help`` (from the typer app, at 80
  columns: what a user's terminal shows).
- ``<!-- nodeprov:openapi -->`` becomes the HTTP API's reference, rendered from the OpenAPI
  document the service serves (``create_app().openapi()``): each route, its parameters, body
  and answers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

_CLI = "<!-- nodeprov:cli -->"
_OPENAPI = "<!-- nodeprov:openapi -->"


def on_page_markdown(markdown: str, **_: Any) -> str:
    if _CLI in markdown:
        markdown = markdown.replace(_CLI, cli_reference())
    if _OPENAPI in markdown:
        markdown = markdown.replace(_OPENAPI, openapi_reference())
    return markdown


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command's path under ``command`` (the top level's once :func:`load_commands` ran)."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def cli_reference() -> str:
    """Every command's ``--help``, as the CLI prints it at 80 columns."""
    import typer.main
    from typer.testing import CliRunner

    from nodeprov.cli import app
    from nodeprov.cli.app import load_commands

    load_commands()
    runner = CliRunner()
    sections = []
    for path in _commands(typer.main.get_command(app)):
        name = " ".join(("nodeprov", *path))
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
        if result.exit_code != 0:
            raise RuntimeError(f"{name} --help failed: {result.output}")
        level = "#" * min(2 + len(path), 4)
        shown = result.output.rstrip()
        sections.append(f"{level} `{name}`\n\n<!-- not run: help text -->\n```text\n{shown}\n```\n")
    return "\n".join(sections)


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"list of {_schema_name(schema.get('items', {}))}"
    if "anyOf" in schema:
        return " or ".join(_schema_name(option) for option in schema["anyOf"])
    return str(schema.get("type", "object"))


def _cell(text: Any) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def openapi_reference() -> str:
    """The HTTP API, route by route, then the schemas of the bodies and answers."""
    os.environ.setdefault("NODEPROV_SERVE_CONFIG", json.dumps({}))
    from nodeprov.service import create_app

    document = create_app().openapi()
    out: list[str] = [f"OpenAPI {document['openapi']}, version {document['info']['version']}.\n"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            out.append(f"### `{method.upper()} {path}`\n")
            out.append(f"{_cell(operation.get('summary'))}. {operation.get('description', '')}\n")
            security = "no token" if operation.get("security") == [] else "a bearer token"
            out.append(f"*Authentication:* {security}.\n")
            parameters = operation.get("parameters", [])
            if parameters:
                out.append("| parameter | in | type | required | description |\n|---|---|---|---|---|")
                out += [
                    f"| `{p['name']}` | {p['in']} | {_schema_name(p.get('schema', {}))} | "
                    f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description'))} |"
                    for p in parameters
                ]
                out.append("")
            body = operation.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                schema = content["schema"]
                out.append(f"*Body* ({media}): {_linked(schema)}\n")
            out.append("| answer | body | description |\n|---|---|---|")
            for status, answer in operation.get("responses", {}).items():
                schemas = [c.get("schema", {}) for c in answer.get("content", {}).values()]
                shown = ", ".join(_linked(schema) for schema in schemas)
                out.append(f"| {status} | {shown or '-'} | {_cell(answer.get('description'))} |")
            out.append("")
    out.append("## Schemas\n")
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        out.append(f"### {name}\n")
        if schema.get("description"):
            out.append(f"{schema['description']}\n")
        properties = schema.get("properties", {})
        if properties:
            required = set(schema.get("required", []))
            out.append("| field | type | required | description |\n|---|---|---|---|")
            out += [
                f"| `{field}` | {_cell(_schema_name(spec))} | {'yes' if field in required else 'no'} | "
                f"{_cell(spec.get('description'))} |"
                for field, spec in properties.items()
            ]
            out.append("")
        elif "enum" in schema:
            out.append("One of " + ", ".join(f"`{value}`" for value in schema["enum"]) + ".\n")
    return "\n".join(out)


def _linked(schema: dict[str, Any]) -> str:
    """A schema's name, linked to its entry under Schemas when it has one."""
    name = _schema_name(schema)
    return f"[{name}](#{name.lower()})" if "$ref" in schema else name
