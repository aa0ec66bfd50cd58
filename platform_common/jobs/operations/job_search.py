"""Where a job id is: the agent types that hold a job of that id (a job hash, a waiting
job packed in the queued hash, or a result), for the console's search by id.

Three bounded reads a type, for every type in one pipeline (MAX_AGENT_TYPES types at
most, the id's own keys only): HMGET of the job hash's payload, HGET of the queued hash's
field, PEXPIRETIME of the result (the reader role's commands: no EXISTS needed). A key
of another type answers WRONGTYPE: the job's page says what is wrong, so that type is
listed; a type this Redis user may not read is skipped."""

from __future__ import annotations

from collections.abc import Sequence

from redis.exceptions import NoPermissionError

from ..queue import JobQueue
from ..validation import validate_job_id
from .session import replies_undecoded

__all__ = ["find_job"]


async def find_job(queue: JobQueue, agent_types: Sequence[str], job_id: str) -> list[str]:
    """The types of `agent_types` that hold a job `job_id`, in their order. An id no job
    can have (validation.validate_job_id) is InvalidJobId, before any read."""
    validate_job_id(job_id)
    commands = []
    for agent_type in agent_types:
        keys = queue.connection.keys(agent_type)
        commands += [
            ("HMGET", keys.job(job_id), "payload"),
            ("HGET", keys.queued, job_id),
            ("PEXPIRETIME", keys.result(job_id)),
        ]
    if not commands:
        return []
    # As bytes: a stored value that is not UTF-8 still says the job is there.
    replies = await replies_undecoded(queue, commands)
    found = []
    for index, agent_type in enumerate(agent_types):
        job, packed, result_expiry = replies[3 * index : 3 * index + 3]
        answers = (job, packed, result_expiry)
        if any(isinstance(a, NoPermissionError) for a in answers):
            continue
        errors = [a for a in answers if isinstance(a, Exception)]
        if errors and not all("WRONGTYPE" in str(e) for e in errors):
            raise errors[0]
        there = (
            bool(errors)
            or (isinstance(job, list) and job[0] is not None)
            or packed is not None
            or (isinstance(result_expiry, int) and result_expiry != -2)
        )
        if there:
            found.append(agent_type)
    return found
