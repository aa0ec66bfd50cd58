"""Checks on caller input shared by every backend: job ids, TTLs, owner ids, names."""

from __future__ import annotations

import math
import re
from typing import TypeGuard

from .errors import InvalidJobId, InvalidTTL, ValidationError

__all__ = [
    "MAX_JOB_ID_LENGTH",
    "is_finite_number",
    "is_int",
    "validate_job_id",
    "validate_name",
    "validate_owner_oid",
    "validate_ttl",
]

MAX_JOB_ID_LENGTH = 200
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


def validate_ttl(ttl_seconds: object, field: str = "ttl_seconds") -> int:
    if not is_int(ttl_seconds):
        raise InvalidTTL(f"must be a positive int, got {type(ttl_seconds).__name__}", field)
    if ttl_seconds <= 0:
        raise InvalidTTL(f"must be a positive int, got {ttl_seconds}", field)
    return ttl_seconds


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
