"""JSON from an upload (a trace, a what-if profile), parsed so that every problem is an `InvalidInput`.

An uploaded file is hostile until checked: `json.loads` alone answers a file nested
200,000 deep with RecursionError, a 5,000-digit number with ValueError (Python's
int digit limit), and lets NaN, Infinity and 1e309 through as timings. Here each is
refused with a message naming the file, before any of it reaches a renderer.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from pathlib import Path
from typing import Any

from .errors import InvalidInput

MAX_DEPTH = 64          # a race trace nests 7 deep; deeper is no SpecViz file (and deep-copies would overflow)
MAX_INT_DIGITS = 30     # token ids, counts, seeds: none is longer

# A JSON string, or an unterminated one running to the end: matched in one pass with no retries, so a file of
# escaped quotes costs linear time (a plain "..." pattern restarts at every quote and goes quadratic).
_STRING = re.compile(r'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def check_size(size: int, max_bytes: int, what: str = "the trace file") -> None:
    if size > max_bytes:
        raise InvalidInput(f"{what} is {size / 2**20:.1f} MB; the limit is {max_bytes / 2**20:.3g} MB")


def nesting_depth(text: str) -> int:
    """How deep `text`'s arrays and objects nest, brackets inside strings ignored; C-speed scans only."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _refuse_constant(name: str):
    raise InvalidInput(f"holds {name}, which is no number a SpecViz file can have")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise InvalidInput(f"holds the number {literal[:40]}, too large to be a time or a probability")
    return value


def _short_int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise InvalidInput(f"holds a whole number of {digits} digits; none in a SpecViz file has more than "
                           f"{MAX_INT_DIGITS}")
    return int(literal)


def loads(text: str | bytes, what: str = "the trace file") -> Any:
    """`text` parsed as JSON, or an `InvalidInput` saying what is wrong with `what` (never another exception)."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON (it is not UTF-8 text: {exc.reason} at byte "
                           f"{exc.start})") from None
    if nesting_depth(text) > MAX_DEPTH:
        raise InvalidInput(f"{what} nests arrays or objects more than {MAX_DEPTH} deep; no SpecViz file does")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_short_int)
    except InvalidInput as exc:
        raise InvalidInput(f"{what} {exc}") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON ({exc})") from None
    except (RecursionError, ValueError, TypeError, MemoryError) as exc:   # the parser's own limits, as a last resort
        raise InvalidInput(f"{what} is not valid JSON ({type(exc).__name__}: {str(exc)[:120]})") from None


def load_object(text: str | bytes, what: str = "the trace file") -> dict:
    """`loads` of a file that must hold one JSON object."""
    data = loads(text, what)
    if not isinstance(data, dict):
        raise InvalidInput(f"{what} holds a JSON {json_kind(data)}, not the object a SpecViz file is")
    return data


def read_limited(path, max_bytes: int, what: str = "the trace file") -> bytes:
    """The bytes of an uploaded file, its size on disk checked before a byte of it is read."""
    check_size(Path(path).stat().st_size, max_bytes, what)
    data = Path(path).read_bytes()
    check_size(len(data), max_bytes, what)   # a file that grew since (or a pipe) is held to the limit too
    return data


def json_kind(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages: 'an array' reads better than 'list'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)
