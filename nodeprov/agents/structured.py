"""Structured output: a turn's result checked against the run's JSON schema."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from .messages import Result

__all__ = ["check_structured", "parse_structured"]

_MISSING = object()


def parse_structured(text: str) -> Any:
    """The JSON value of an agent's final text; ``ValueError`` if it is none. A fenced
    block (```json ... ```) is unwrapped, as models sometimes add one."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    return json.loads(body)


def check_structured(result: Result, schema: Mapping[str, Any], value: Any = _MISSING) -> Result:
    """``result`` with ``structured`` set to ``value`` (else parsed from its text) when that
    matches ``schema``; else an error result saying why. A failed result stays as it is."""
    if result.is_error:
        return result
    if value is _MISSING or value is None:
        try:
            value = parse_structured(result.text)
        except ValueError as error:
            return dataclasses.replace(
                result,
                is_error=True,
                text=f"the agent's result is not JSON for the output schema ({error}): {result.text[:200]!r}",
            )
    import jsonschema  # a tenth of a second, for the runs that ask for structured output alone

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as error:
        return dataclasses.replace(
            result,
            is_error=True,
            structured=value,
            text=f"the agent's result does not match the output schema: {error.message}",
        )
    except jsonschema.SchemaError as error:
        return dataclasses.replace(
            result, is_error=True, text=f"the output schema is invalid: {error.message}"
        )
    return dataclasses.replace(result, structured=value)
