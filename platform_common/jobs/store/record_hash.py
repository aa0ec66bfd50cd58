"""The stored form of a record in Redis: one HASH, parsed strictly (never half-read)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError

from ..errors import InvalidRecord
from ..status import JobStatus
from .listing import Row
from .record import JobRecord
from .time_index import created_us, member

__all__ = ["ROW_FIELDS", "exact_us", "is_wrong_type", "parse_hash"]

ROW_FIELDS = ("status", "payload", "result", "error", "created_at", "updated_at", "version",
              "owner_oid")  # fmt: skip
_REQUIRED_FIELDS = frozenset({"status", "payload", "created_at", "updated_at", "version"})
_REDIS_TIME = re.compile(r"(\d+)\.(\d{6})")


def parse_hash(job_id: str, fields: dict[str, str]) -> Row:
    """A stored hash as (JobRecord, index member). Anything malformed raises InvalidRecord
    naming the field, so no half-read record ever leaves the store.

    Fields this version does not know are ignored, not refused: during a rolling deploy
    a newer version may add one, and an older reader must still read (and update) the
    record. The store never deletes them either: an update rewrites only its own
    fields, so the newer version finds its field where it left it."""
    missing = _REQUIRED_FIELDS - fields.keys()
    if missing:
        raise InvalidRecord(sorted(missing)[0], f"job {job_id!r}: missing field")
    try:
        status = JobStatus(fields["status"])
    except ValueError:
        raise InvalidRecord("status", f"job {job_id!r}: unknown status") from None
    raw_result = fields.get("result")
    created_raw = fields["created_at"]
    created = _number(job_id, "created_at", created_raw, float)
    record = JobRecord(
        job_id=job_id,
        status=status,
        payload=_json_object(job_id, "payload", fields["payload"]),
        result=None if raw_result is None else _json_object(job_id, "result", raw_result),
        error=fields.get("error"),
        created_at=created,
        updated_at=_number(job_id, "updated_at", fields["updated_at"], float),
        version=_number(job_id, "version", fields["version"], int),
        owner_oid=fields.get("owner_oid", ""),
    )
    if record.version < 1:
        raise InvalidRecord("version", f"job {job_id!r}: must be >= 1")
    exact = exact_us(created_raw)
    return record, member(created_us(created) if exact is None else exact, job_id)


def _json_object(job_id: str, name: str, value: str) -> Any:
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        # RecursionError: nested deeper than the decoder can follow (written around
        # the store's depth bound, e.g. by hand).
        raise InvalidRecord(name, f"job {job_id!r}: stored value is not JSON") from None
    if decoded is not None and not isinstance(decoded, dict):
        raise InvalidRecord(name, f"job {job_id!r}: stored value is not a JSON object")
    return decoded


def _number(job_id: str, name: str, value: str, kind: Callable[[str], Any]) -> Any:
    try:
        number = kind(value)
    except ValueError:
        number = None
    if number is None or not math.isfinite(number):
        raise InvalidRecord(name, f"job {job_id!r}: stored value {value[:40]!r} is not a number")
    return number


def exact_us(created_at: str) -> int | None:
    """Microseconds of a "<sec>.<usec>" timestamp written by the scripts, exactly."""
    match = _REDIS_TIME.fullmatch(created_at)
    return None if match is None else int(match[1]) * 1_000_000 + int(match[2])


def is_wrong_type(exc: ResponseError) -> bool:
    """Redis' answer to a command on a key that holds another type than the command's."""
    return str(exc).startswith("WRONGTYPE")
