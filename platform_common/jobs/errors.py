"""The package's exceptions, one base class for all of them.

JobsError
├── ConfigurationError          a setting is missing or malformed (names the setting)
├── ValidationError             bad input: job id, TTL, payload, record field (names the field)
│   ├── InvalidJobId
│   ├── InvalidTTL
│   ├── InvalidRecord           a dict/hash that is not a valid JobRecord
│   ├── InvalidPayload          a queue payload that fails its schema (lists every bad field)
│   ├── InvalidProgress         a progress report that is not a small JSON object
│   └── InvalidCursor           a pagination cursor that is malformed or foreign
├── JobConflict                 create() of an id that exists
├── JobNotFound                 update() of an id that does not exist
├── VersionConflict             update(expected_version=N) lost the race
├── IllegalTransition           e.g. succeeded -> running
├── LeaseLost                   a worker's lease token no longer owns the job
├── CorruptQueueState           a queue key holds the wrong type or a value that does not
│                               parse (names the key); the operation wrote nothing
└── BackendUnavailable          the backend could not be reached (after retries)
    ├── BackendBusy             reachable, but every pooled connection stayed in use
    └── BackendOutOfMemory      reachable, but at maxmemory: writes are refused
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

__all__ = [
    "BackendBusy",
    "BackendOutOfMemory",
    "BackendUnavailable",
    "ConfigurationError",
    "CorruptQueueState",
    "IllegalTransition",
    "InvalidCursor",
    "InvalidJobId",
    "InvalidPayload",
    "InvalidProgress",
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

    SHOWN = 10
    """Problems named in the message: a batch of 20,000 bad jobs must not make a
    megabytes-long message (or log line); `errors` keeps every one."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = dict(errors)
        names = sorted(self.errors)
        shown, left = names[: self.SHOWN], len(names) - self.SHOWN
        summary = "; ".join(f"{name}: {self.errors[name]}" for name in shown)
        field = ",".join(shown)
        if left > 0:
            summary += f"; and {left} more (InvalidPayload.errors has them all)"
            field += f",+{left} more"
        super().__init__(field or "payload", summary or "invalid payload")


class InvalidProgress(ValidationError):
    """A progress report (JobContext.report_progress) that cannot be stored: not a JSON
    object, not JSON-serialisable, nested too deeply or too large. Nothing was stored."""

    def __init__(self, problem: str) -> None:
        super().__init__("progress", problem)


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


class BackendOutOfMemory(BackendUnavailable, OutOfMemoryError):
    """Redis reached `maxmemory` and, under `noeviction`, refuses every write; reads
    still work. A queue script refused this way wrote nothing. `written` and
    `not_written` are the job ids of an `enqueue_many` that stopped partway (its chunks
    already written stay; retry only `not_written`); both are empty elsewhere.

    Redis' OutOfMemoryError too (what Redis said), so loops that retry Redis errors
    retry this."""

    def __init__(
        self, problem: str, *, written: Sequence[str] = (), not_written: Sequence[str] = ()
    ) -> None:
        self.written = list(written)
        self.not_written = list(not_written)
        if self.not_written:
            problem += (
                f"; {len(self.written)} job(s) written, {len(self.not_written)} not written"
                f" (first not written: {self.not_written[0]!r})"
            )
        super().__init__(problem)


class CorruptQueueState(JobsError, ResponseError):
    """A queue key holds another type than the queue writes there, or a stored value
    (a stats counter, a job field) does not parse. Every queue script checks this before
    its first write, so the operation that raises it changed nothing. `key` is the Redis
    key ("" when Redis did not say which), `problem` what is wrong with it.

    A ResponseError too, so a worker treats it as the script error it is (running the
    same script on the same data fails again)."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"corrupt queue state at {key or 'a key of the call'}: {problem}")
