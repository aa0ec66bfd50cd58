"""The package's exceptions, one base class for all of them.

JobsError
├── ConfigurationError          a setting is missing or malformed (names the setting)
├── ValidationError             bad input: job id, TTL, payload, record field (names the field)
│   ├── InvalidJobId
│   ├── InvalidTTL
│   ├── InvalidRecord           a dict/hash that is not a valid JobRecord
│   ├── InvalidPayload          a queue payload that fails its schema (lists every bad field)
│   └── InvalidCursor           a pagination cursor that is malformed or foreign
├── JobConflict                 create() of an id that exists
├── JobNotFound                 update() of an id that does not exist
├── VersionConflict             update(expected_version=N) lost the race
├── IllegalTransition           e.g. succeeded -> running
├── LeaseLost                   a worker's lease token no longer owns the job
└── BackendUnavailable          the backend could not be reached (after retries)
    └── BackendBusy             reachable, but every pooled connection stayed in use
"""

from __future__ import annotations

from redis.exceptions import RedisError

__all__ = [
    "BackendBusy",
    "BackendUnavailable",
    "ConfigurationError",
    "IllegalTransition",
    "InvalidCursor",
    "InvalidJobId",
    "InvalidPayload",
    "InvalidRecord",
    "InvalidTTL",
    "JobConflict",
    "JobNotFound",
    "JobsError",
    "LeaseLost",
    "ValidationError",
    "VersionConflict",
]


class JobsError(Exception):
    """Base class of every error raised by platform_common.jobs."""


class ConfigurationError(JobsError):
    """A setting is missing or malformed; `setting` names it."""

    def __init__(self, setting: str, problem: str) -> None:
        self.setting = setting
        self.problem = problem
        super().__init__(f"{setting}: {problem}")


class ValidationError(JobsError, ValueError):
    """Bad input; `field` names what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class InvalidJobId(ValidationError):
    def __init__(self, problem: str) -> None:
        super().__init__("job_id", problem)


class InvalidTTL(ValidationError):
    def __init__(self, problem: str, field: str = "ttl_seconds") -> None:
        super().__init__(field, problem)


class InvalidRecord(ValidationError):
    """A stored or supplied record does not have the JobRecord shape."""


class InvalidCursor(ValidationError):
    def __init__(self, problem: str) -> None:
        super().__init__("cursor", problem)


class InvalidPayload(ValidationError):
    """A queue payload failed validation; `errors` maps every bad field to its problem."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = dict(errors)
        summary = "; ".join(f"{name}: {problem}" for name, problem in sorted(self.errors.items()))
        super().__init__(",".join(sorted(self.errors)) or "payload", summary or "invalid payload")


class JobConflict(JobsError):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r} already exists")


class JobNotFound(JobsError, KeyError):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r} does not exist")

    def __str__(self) -> str:  # KeyError would repr() the message
        return f"job {self.job_id!r} does not exist"


class VersionConflict(JobsError):
    def __init__(self, job_id: str, expected: int, actual: int) -> None:
        self.job_id = job_id
        self.expected = expected
        self.actual = actual
        super().__init__(f"job {job_id!r}: expected version {expected}, stored version is {actual}")


class IllegalTransition(JobsError):
    def __init__(self, job_id: str, current: str, requested: str) -> None:
        self.job_id = job_id
        self.current = current
        self.requested = requested
        super().__init__(f"job {job_id!r}: cannot go from {current} to {requested}")


class LeaseLost(JobsError):
    def __init__(self, job_id: str, reason: str = "lease token no longer owns the job") -> None:
        self.job_id = job_id
        self.reason = reason
        super().__init__(f"job {job_id!r}: {reason}")


class BackendUnavailable(JobsError):
    def __init__(self, problem: str) -> None:
        super().__init__(problem)


class BackendBusy(BackendUnavailable, RedisError):
    """Every connection of the pool stayed in use for the pool timeout.

    Redis itself may be healthy: this is back-pressure, not an outage. A RedisError
    too, so loops that back off and retry on Redis errors treat it the same way."""
