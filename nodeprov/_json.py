"""JSON on the hot paths (every agent message, event and transcript entry), through orjson:
several times the standard library's speed. Where orjson refuses a value the standard
library takes (an integer over 64 bits, a lone surrogate, ``NaN``), the standard library
does it, so what is valid stays valid."""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps", "loads"]


def dumps(value: Any) -> str:
    """``value`` as compact JSON text (non-ASCII characters as they are).

    Raises:
        TypeError: ``value`` holds what JSON cannot (``json.dumps`` says what).
        ValueError: ``value`` is circular.
    """
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def loads(text: str | bytes) -> Any:
    """The value of the JSON ``text``.

    Raises:
        ValueError: ``text`` is not JSON (``json.JSONDecodeError``), or, as bytes, not UTF-8
            (``UnicodeDecodeError``).
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
