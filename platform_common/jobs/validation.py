"""Checks on caller input shared by every backend: ids, names, TTLs, JSON and text bounds."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import TypeGuard

from .errors import InvalidJobId, InvalidTTL, ValidationError

__all__ = [
    "MAX_CLOCK_SKEW_SECONDS",
    "MAX_JOB_ID_LENGTH",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_TEXT_BYTES",
    "MAX_TTL_SECONDS",
    "check_json_bounds",
    "encode_json",
    "is_finite_number",
    "is_int",
    "json_bounds_problem",
    "text_problem",
    "ttl_problem",
    "validate_job_id",
    "validate_name",
    "validate_owner_oid",
    "validate_text",
    "validate_ttl",
]

MAX_JOB_ID_LENGTH = 200
MAX_TTL_SECONDS = 10 * 365 * 86_400
"""10 years. Far above any job's life, far below what makes Redis' EXPIRE overflow
(2**63-1 is refused by Redis itself, after a script may already have written)."""
MAX_CLOCK_SKEW_SECONDS = 300
"""How far a caller's `created_at` may lie ahead of Redis TIME. Only a queue payload
carries one: the JobStore stamps created_at itself (Redis TIME, or the process clock for
memory://) and takes none from callers. Clocks of hosts drift by seconds, not minutes;
a `created_at` in year 2999 is a bug or an attack, and would make a job that never
expires and a record with no TTL."""
MAX_JSON_DEPTH = 64
"""Containers nested in one JSON value (the top-level object counts as 1). Decoders
recurse, so depth is what turns input into a RecursionError far from its cause."""
MAX_JSON_BYTES = 1 << 20
"""1 MiB: the compact encoding of one payload or result, as stored."""
MAX_TEXT_BYTES = 64 << 10
"""64 KiB of UTF-8: one free-text field such as a job's error."""

# Letters, digits and a few separators: nothing that breaks a Redis key pattern
# ({}*?[]), a log line (control characters, newlines) or a URL path segment.
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*")
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool: True is an int to Python, never a count or a size."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: object) -> TypeGuard[int | float]:
    """An int or float (not a bool), neither infinite nor NaN."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def validate_job_id(job_id: object) -> str:
    if not isinstance(job_id, str):
        raise InvalidJobId(f"must be a string, got {type(job_id).__name__}")
    if not job_id:
        raise InvalidJobId("must not be empty")
    if len(job_id) > MAX_JOB_ID_LENGTH:
        raise InvalidJobId(f"longer than {MAX_JOB_ID_LENGTH} characters")
    if not _JOB_ID.fullmatch(job_id):
        raise InvalidJobId(
            "may hold only letters, digits and . _ : @ - and must start with a letter or digit"
        )
    return job_id


def ttl_problem(ttl_seconds: object, maximum: int = MAX_TTL_SECONDS) -> str | None:
    """What is wrong with a TTL in seconds (an int from 1 to `maximum`), or None."""
    if not is_int(ttl_seconds):
        return f"must be a positive int, got {type(ttl_seconds).__name__}"
    if ttl_seconds <= 0:
        return f"must be a positive int, got {ttl_seconds}"
    if ttl_seconds > maximum:
        return f"must be at most {maximum} ({maximum // 86_400} days), got {ttl_seconds}"
    return None


def validate_ttl(
    ttl_seconds: object, field: str = "ttl_seconds", maximum: int = MAX_TTL_SECONDS
) -> int:
    problem = ttl_problem(ttl_seconds, maximum)
    if problem is not None:
        raise InvalidTTL(problem, field)
    assert is_int(ttl_seconds)
    return ttl_seconds


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored as UTF-8 (a lone surrogate, e.g. from a bytes value
    decoded with errors="surrogateescape"), or None. Refused rather than escaped: no
    reader (Redis clients, JSON responses, logs) could turn it back into text either."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid Unicode text: lone surrogate {text[exc.start]!r} at {exc.start}"
    return None


def validate_text(value: object, field: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """A string that encodes as UTF-8 in at most `max_bytes` bytes."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    problem = text_problem(value)
    if problem is not None:
        raise ValidationError(field, problem)
    # A character is 1 to 4 bytes: only a length in between needs the encoding measured.
    if len(value) > max_bytes or (
        len(value) > max_bytes // 4 and len(value.encode("utf-8")) > max_bytes
    ):
        raise ValidationError(field, f"longer than {max_bytes} bytes as UTF-8")
    return value


def json_bounds_problem(
    value: object, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> str | None:
    """What makes `value` too deep, too large, not encodable text or an object with a key
    that is not a string (json would write 1 and True as "1" and "true", merging keys),
    or None.

    One iterative walk (no recursion, so no depth can overflow the stack). It counts a
    lower bound of the encoded size as it goes and stops as soon as that passes
    `max_bytes`, so a value that shares one list many times over (small in memory,
    huge encoded) costs at most about `max_bytes` steps. A cycle is nested without end
    and stops at `max_depth`. Types JSON cannot encode are left to the encoder."""
    budget = max_bytes
    stack: list[Iterator[tuple[object, object]]] = []
    in_dict: list[bool] = []  # per level of `stack`: its keys are an object's, not positions
    path: list[object] = []
    node: object = value
    while True:
        if isinstance(node, dict | list | tuple):
            if len(stack) >= max_depth:
                return f"nested deeper than {max_depth} levels at {_where(path)}"
            budget -= 1 + max(len(node), 1)  # brackets and separators
            stack.append(iter(node.items()) if isinstance(node, dict) else enumerate(node))
            in_dict.append(isinstance(node, dict))
            path.append(None)
        elif isinstance(node, str):
            budget -= len(node) + 2
            problem = text_problem(node)
            if problem is not None:
                return f"{problem} (at {_where(path)})"
        else:
            budget -= 1
        if budget < 0:
            return f"larger than {max_bytes} bytes encoded"
        while stack:
            step = next(stack[-1], None)
            if step is not None:
                break
            stack.pop()
            in_dict.pop()
            path.pop()
        else:
            return None
        key, node = step
        path[-1] = key
        if in_dict[-1]:
            if not isinstance(key, str):
                return (
                    f"must be a JSON object (string keys): {type(key).__name__} key "
                    f"{_brief(key)} at {_where(path[:-1])}"
                )
            budget -= len(key) + 3
            problem = text_problem(key)
            if problem is not None:
                return f"key {problem} (at {_where(path[:-1])})"


def check_json_bounds(
    value: object, field: str, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> None:
    """ValidationError naming `field` when `json_bounds_problem` finds something."""
    problem = json_bounds_problem(value, max_depth=max_depth, max_bytes=max_bytes)
    if problem is not None:
        raise ValidationError(field, problem)


def encode_json(
    value: object, field: str, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> str:
    """The compact JSON text of `value` (ASCII, no NaN), within the bounds, or
    ValidationError naming `field`. The bounds are checked before the encoder runs."""
    check_json_bounds(value, field, max_depth=max_depth, max_bytes=max_bytes)
    try:
        encoded = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        # RecursionError only from a container type whose iteration lies to the walk
        # (a dict subclass overriding items()): still our error, never a crash.
        raise ValidationError(field, f"must be JSON-serialisable: {exc}") from None
    if len(encoded) > max_bytes:  # ASCII: one byte a character
        raise ValidationError(field, f"larger than {max_bytes} bytes encoded ({len(encoded)})")
    return encoded


def _where(path: list[object]) -> str:
    return "$" + "".join(f"[{key!r}]" for key in path if key is not None)


def _brief(value: object, limit: int = 40) -> str:
    """repr(value), cut to `limit` characters: an error names a key, never echoes a blob."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validate_owner_oid(owner_oid: object) -> str:
    """ "" is the shared bucket; anything else follows the job-id rules."""
    if not isinstance(owner_oid, str):
        raise ValidationError("owner_oid", f"must be a string, got {type(owner_oid).__name__}")
    if owner_oid == "":
        return owner_oid
    if len(owner_oid) > MAX_JOB_ID_LENGTH or not _JOB_ID.fullmatch(owner_oid):
        raise ValidationError(
            "owner_oid", "may hold only letters, digits and . _ : @ - (at most 200)"
        )
    return owner_oid


def validate_name(value: object, field: str) -> str:
    """An agent or agent-type name: lower-case, short, safe inside a key and a label."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValidationError(
            field, f"{value!r} must be 1-63 chars of a-z 0-9 _ . - starting with a letter or digit"
        )
    return value
