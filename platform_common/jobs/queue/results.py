"""Read a finished job's result: the envelope every terminal outcome stores with its TTL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRecord
from ..status import RESULT_STATES, QueueState
from .connection import QueueConnection

__all__ = ["JobResult", "ResultTooLarge", "get_result", "parse_result"]


class ResultTooLarge(ValueError):
    """A handler's result encodes to more than max_result_bytes: its job fails for good
    (the same result would come back on a retry) and the result is not stored. Its name
    is the error class the failure is counted under."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"result is {size} bytes encoded, over the limit of {limit} (QUEUE_MAX_RESULT_BYTES)"
        )
        self.size = size
        self.limit = limit


@dataclass(frozen=True, slots=True)
class JobResult:
    """How a job ended. Stored at `result:<id>` as JSON before the completion event."""

    job_id: str
    """The job's id (unique within its agent type)."""
    agent_type: str
    """The agent type whose queue ran it."""
    status: QueueState
    """One of RESULT_STATES: SUCCEEDED, FAILED (dead-lettered or non-retryable) or EXPIRED."""
    result: Any
    """The handler's return value (succeeded), else None."""
    error: str | None
    """Why it failed or expired, else None."""

    @property
    def ok(self) -> bool:
        return self.status == QueueState.SUCCEEDED


def parse_result(agent_type: str, job_id: str, text: str) -> JobResult:
    """Decode a stored envelope; anything malformed raises InvalidRecord (not half-read)."""
    try:
        data = json.loads(text)
    except ValueError:
        raise InvalidRecord("result", f"job {job_id!r}: stored result is not JSON") from None
    status = data.get("status") if isinstance(data, dict) else None
    # isinstance first: an unhashable status (a list) must not reach the set lookup.
    if not isinstance(status, str) or status not in RESULT_STATES:
        raise InvalidRecord("result", f"job {job_id!r}: stored result has no valid status")
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        raise InvalidRecord("result", f"job {job_id!r}: error must be a string")
    return JobResult(job_id, agent_type, QueueState(status), data.get("result"), error)


async def get_result(
    connection: QueueConnection, job_id: str, agent_type: str | None = None
) -> JobResult | None:
    """The result of `job_id`, or None while it runs / once its TTL passed / if unknown.

    Without `agent_type` every configured type is looked up in one pipelined round trip
    (ids are unique per type; the first type holding one wins)."""
    types: Sequence[str] = (agent_type,) if agent_type else connection.settings.agent_types
    pipe = connection.client.pipeline(transaction=False)
    for name in types:
        pipe.get(connection.keys(name).result(job_id))
    for name, text in zip(types, await pipe.execute(), strict=True):
        if text is not None:
            return parse_result(name, job_id, text)
    return None
