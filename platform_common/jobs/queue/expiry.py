"""Expire jobs past their TTL (lua/queue_expire.lua): the cost grows with the jobs
expired, never with the backlog queued behind them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..keys import QueueKeys
from ..redis.script import Script

__all__ = ["CORRUPT_RESULT_TTL_SECONDS", "ExpireReport", "expire_jobs"]

CORRUPT_RESULT_TTL_SECONDS = 86_400
"""How long the "expired" result of a job whose stored ttl does not parse is kept."""

RunScript = Callable[[Script, list[str], list[Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ExpireReport:
    """What one expiry call did."""

    expired: tuple[str, ...] = ()
    """The jobs this call expired (each one counted, its result stored, published)."""
    corrupt: tuple[tuple[str, str], ...] = ()
    """(job_id, problem) of the expired jobs whose stored record did not parse: expired
    all the same (the problem is in their result), so one such record cannot stall
    every later cleanup run."""


async def expire_jobs(
    run_script: RunScript, script: Script, keys: QueueKeys, job_ids: Sequence[str]
) -> ExpireReport:
    """Expire those of `job_ids` whose TTL has passed (by Redis TIME).

    CorruptQueueState (naming the key, raised by `run_script` from the script's CORRUPT
    reply) if a queue key holds another type or the `expired` counter is not an
    integer; nothing is written then."""
    if not job_ids:
        return ExpireReport()
    script_keys = [
        keys.expiry,
        keys.delayed,
        keys.processing,
        keys.leases,
        keys.stats,
        keys.waiting,
    ]
    for job_id in job_ids:
        script_keys += [keys.job(job_id), keys.result(job_id)]
    args: list[Any] = [keys.channel, CORRUPT_RESULT_TTL_SECONDS, *job_ids]
    expired, *corrupt = await run_script(script, script_keys, args)
    return ExpireReport(
        expired=tuple(str(job_id) for job_id in expired),
        corrupt=tuple((str(job_id), str(problem)) for job_id, problem in corrupt),
    )
