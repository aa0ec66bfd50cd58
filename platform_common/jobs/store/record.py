"""JobRecord: the state of one job, as every backend stores and returns it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import InvalidRecord
from ..status import JobStatus
from ..validation import is_finite_number, is_int

__all__ = ["JobRecord"]


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's state. Immutable: a store returns a new record for every change."""

    job_id: str
    """The caller-chosen id, unique within one agent's namespace."""
    status: JobStatus
    """Where the job is in its life (see JobStatus)."""
    payload: dict[str, Any] | None = None
    """What the job was asked to do (JSON-serialisable), or None."""
    result: dict[str, Any] | None = None
    """What the job produced (JSON-serialisable), or None."""
    error: str | None = None
    """Why the job failed, or None."""
    created_at: float = 0.0
    """Seconds since the epoch when the record was created (server clock for Redis)."""
    updated_at: float = 0.0
    """Seconds since the epoch of the last change."""
    version: int = 1
    """1 at create, +1 on every update; see update(expected_version=...)."""
    owner_oid: str = field(default="")
    """Who owns the job for listing; "" means shared (visible to every owner)."""

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON-serialisable dict; `from_dict(to_dict(r)) == r`."""
        data = {name: getattr(self, name) for name in _FIELDS}
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: Any) -> JobRecord:
        """Build a record from `to_dict()` output; any unknown, missing or mistyped key
        raises InvalidRecord naming the field, so no half-built record ever exists."""
        if not isinstance(data, dict):
            raise InvalidRecord("record", f"expected a dict, got {type(data).__name__}")
        unknown = sorted(str(k) for k in data if k not in _FIELDS)
        if unknown:
            raise InvalidRecord(unknown[0], "unknown field")
        missing = sorted(_REQUIRED - data.keys())
        if missing:
            raise InvalidRecord(missing[0], "missing field")
        job_id = data["job_id"]
        if not isinstance(job_id, str) or not job_id:
            raise InvalidRecord("job_id", "must be a non-empty string")
        status_raw = data["status"]
        if not isinstance(status_raw, str):
            raise InvalidRecord("status", "must be a string")
        try:
            status = JobStatus(status_raw)
        except ValueError:
            raise InvalidRecord("status", f"unknown status {status_raw!r}") from None
        for name in ("payload", "result"):
            value = data[name]
            if value is not None and not isinstance(value, dict):
                raise InvalidRecord(name, "must be a dict or None")
        error = data["error"]
        if error is not None and not isinstance(error, str):
            raise InvalidRecord("error", "must be a string or None")
        created_at = _timestamp(data, "created_at")
        updated_at = _timestamp(data, "updated_at")
        version = data["version"]
        if not is_int(version) or version < 1:
            raise InvalidRecord("version", "must be an int >= 1")
        owner = data.get("owner_oid", "")
        if not isinstance(owner, str):
            raise InvalidRecord("owner_oid", "must be a string")
        return cls(
            job_id=job_id,
            status=status,
            payload=data["payload"],
            result=data["result"],
            error=error,
            created_at=created_at,
            updated_at=updated_at,
            version=version,
            owner_oid=owner,
        )


_FIELDS = tuple(f.name for f in fields(JobRecord))
_REQUIRED = frozenset(_FIELDS) - {"owner_oid"}


def _timestamp(data: dict[str, Any], name: str) -> float:
    value = data[name]
    if not is_finite_number(value):
        raise InvalidRecord(name, "must be a finite number")
    return float(value)
