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
    fields, so the newer version finds its field where it left it.

    lua/store_update.lua applies these same rules, in this order, before it writes (it
    leaves to this function what it cannot judge): a rule changed here changes there too,
    and tests/store/test_update_script_parity.py holds the two to one verdict."""
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
    index_us = _index_us(job_id, created_raw, created)
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
    return record, member(index_us, job_id)


def _index_us(job_id: str, created_raw: str, created: float) -> int:
    """The record's place in the time index: exact for create's "<sec>.<usec>", else
    rounded from the float, which must stay finite in microseconds (past 1.8e302 s it
    does not: refused with the field, like any other unreadable created_at)."""
    exact = exact_us(created_raw)
    if exact is not None:
        return exact
    try:
        return created_us(created)
    except OverflowError:
        raise InvalidRecord(
            "created_at", f"job {job_id!r}: stored value {created_raw[:40]!r} is out of range"
        ) from None


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
        finite = math.isfinite(number)
    except (ValueError, OverflowError):
        # OverflowError: an int past the largest float (math.isfinite converts it).
        finite = False
    if not finite:
        raise InvalidRecord(name, f"job {job_id!r}: stored value {value[:40]!r} is not a number")
    return number


def exact_us(created_at: str) -> int | None:
    """Microseconds of a "<sec>.<usec>" timestamp written by the scripts, exactly."""
    match = _REDIS_TIME.fullmatch(created_at)
    return None if match is None else int(match[1]) * 1_000_000 + int(match[2])


def is_wrong_type(exc: ResponseError) -> bool:
    """Redis' answer to a command on a key that holds another type than the command's."""
    return str(exc).startswith("WRONGTYPE")
