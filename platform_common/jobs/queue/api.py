"""JobQueue: the one object producers and orchestrators hold."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar

from opentelemetry.trace import TracerProvider

from ..keys import LATENCY_COUNT_FIELD, LATENCY_SUM_FIELD, STATS_COUNTERS
from ..status import JOB_STATUS_OF, JobStatus, QueueState
from ..store.record import JobRecord
from .backend_errors import backend_errors
from .cancel import CancelReport, cancel_jobs, cancel_session
from .completions import OUTAGE_TIMEOUT, Completions
from .connection import QueueConnection
from .dead_letters import DeadLetters
from .envelope import queued_record_fields
from .expiry import expire_due
from .limits import (
    KEEP,
    FairWaits,
    Keep,
    Limits,
    Rate,
    limit_changes,
    read_fair_waits,
    read_key_weights,
    read_limits,
    weight_changes,
    write_key_weights,
    write_limits,
)
from .pausing import PauseState, read_pause, set_paused
from .priority import Priority
from .producer import Job, Producer
from .progress import Progress, parse_stored
from .progress_events import ProgressEvents
from .queue_settings import QueueSettings
from .results import JobResult, get_result, parse_result

__all__ = ["JobQueue", "QueueStats"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One agent type's queue at one moment (what the exporter also reads)."""

    queued: int
    """Jobs waiting on the queue list: the waiting set's size. Not the list's length,
    which also counts entries of jobs expired while waiting until a worker drops them."""
    in_progress: int
    delayed: int
    dead: int
    counters: dict[str, int]
    """Every keys.STATS_COUNTERS field (0 when never incremented), plus latency_count."""
    latency_sum: float
    queued_by_priority: dict[str, int] = field(default_factory=dict)
    """`queued` by priority level (queue.priority): "high" and "low" are their lists'
    lengths (an expired job leaves its level's list), "normal" the rest."""


class JobQueue:
    """Enqueue jobs, wait for completions, read results, manage dead letters.

    Build it with `await JobQueue.connect(settings)` and `aclose()` it (or use
    `async with`). Workers are separate: see Worker. An unreachable Redis raises
    BackendUnavailable (naming the redacted URL), a full pool BackendBusy, as the
    JobStore does; never a raw redis-py error."""

    def __init__(
        self, connection: QueueConnection, *, tracer_provider: TracerProvider | None = None
    ) -> None:
        self.connection = connection
        self.settings = connection.settings
        self._producer = Producer(connection, tracer_provider=tracer_provider)
        self.dead_letters: DeadLetters = _DeadLetters(connection)
        """Jobs that used their last attempt (or whose stored job did not parse)."""
        self.failed_jobs: DeadLetters = _DeadLetters(connection, failed=True)
        """Jobs failed for good by NonRetryableError; the same verbs as dead_letters."""

    @classmethod
    async def connect(
        cls,
        settings: QueueSettings | str | None = None,
        *,
        tracer_provider: TracerProvider | None = None,
    ) -> JobQueue:
        """Connect (pre-warming the pool). `settings` may be a URL; None reads QUEUE_* env.
        Spans go to `tracer_provider`, by default OpenTelemetry's global one (see
        queue.tracing)."""
        if settings is None:
            settings = QueueSettings.from_env()
        elif isinstance(settings, str):
            settings = QueueSettings.from_url(settings)
        with backend_errors(settings.redis):
            return cls(await QueueConnection.open(settings), tracer_provider=tracer_provider)

    async def enqueue(
        self,
        job: Job,
        *,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: Priority | None = None,
    ) -> str:
        """See Producer.enqueue; `delay` or `run_at` schedules the job (queue.schedule),
        `priority` is "high", "normal" (the default) or "low" (queue.priority)."""
        return await self._producer.enqueue(job, delay=delay, run_at=run_at, priority=priority)

    async def enqueue_many(
        self,
        jobs: Iterable[Job],
        *,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: Priority | Sequence[Priority | None] | None = None,
    ) -> list[str]:
        """See Producer.enqueue_many; `delay` or `run_at` schedules every job, `priority`
        is one level for all, or one per job."""
        return await self._producer.enqueue_many(
            jobs, delay=delay, run_at=run_at, priority=priority
        )

    @property
    def trace_context_dropped(self) -> dict[str, int]:
        """See Producer.trace_context_dropped."""
        return self._producer.trace_context_dropped

    async def get_result(self, job_id: str, agent_type: str | None = None) -> JobResult | None:
        """See results.get_result."""
        with backend_errors(self.settings.redis):
            return await get_result(self.connection, job_id, agent_type)

    def completions(
        self,
        *,
        watch: Iterable[tuple[str, str]] = (),
        every_job: bool = False,
        outage_timeout: float = OUTAGE_TIMEOUT,
    ) -> Completions:
        """An async iterator of completions of the watched jobs (see Completions);
        `outage_timeout`: seconds Redis may stay unreachable before `anext()` raises
        BackendUnavailable."""
        return Completions(
            self.connection, watch=watch, every_job=every_job, outage_timeout=outage_timeout
        )

    async def progress(self, agent_type: str, job_id: str) -> Progress | None:
        """The last progress report of a job (see queue.progress): while it runs, and
        after it ended for as long as its record is kept; None when it never reported
        (or its record is gone). ValidationError for a type that is not configured;
        CorruptQueueState when the stored report does not parse."""
        keys = self.connection.known_keys(agent_type)
        with backend_errors(self.settings.redis):
            report, at = await self.connection.client.hmget(
                keys.job(job_id), ["progress", "progress_at"]
            )  # type: ignore[misc]
        return parse_stored(keys, job_id, report, at)

    def progress_events(
        self,
        agent_type: str,
        *,
        watch: Iterable[str] = (),
        outage_timeout: float = OUTAGE_TIMEOUT,
    ) -> ProgressEvents:
        """An async iterator of the progress reports of `agent_type`'s jobs, those of
        the `watch`ed job ids only if any are given (see ProgressEvents)."""
        return ProgressEvents(
            self.connection, agent_type, watch=watch, outage_timeout=outage_timeout
        )

    async def pause(self, agent_type: str) -> PauseState:
        """Stop workers starting jobs of `agent_type` (see queue.pausing): once this
        returns, no job of the type starts until `resume`; running jobs finish, enqueue
        still accepts, TTLs keep running. Pausing a paused type changes nothing
        (`changed` False, `since` the first pause). ValidationError for a type that is not
        configured; CorruptQueueState (nothing written) if its pause key holds another
        type."""
        with backend_errors(self.settings.redis):
            return await set_paused(self.connection, agent_type, True)

    async def resume(self, agent_type: str) -> PauseState:
        """Let workers take jobs of `agent_type` again (within about a second). Resuming
        a type that runs changes nothing (`changed` False); errors as for `pause`."""
        with backend_errors(self.settings.redis):
            return await set_paused(self.connection, agent_type, False)

    async def pause_state(self, agent_type: str) -> PauseState:
        """Whether `agent_type` is paused now, and since when (errors as for `pause`)."""
        with backend_errors(self.settings.redis):
            return await read_pause(self.connection, agent_type)

    async def set_limits(
        self,
        agent_type: str,
        *,
        fair_by: str | Keep | None = KEEP,
        rate: str | Rate | Keep | None = KEEP,
        burst: int | Keep | None = KEEP,
        max_running: int | Keep | None = KEEP,
        max_running_per_key: int | Keep | None = KEEP,
    ) -> Limits:
        """Change the limits of `agent_type` (see queue.limits): each one given is set,
        None lifts it, one left out stays as it is. `rate` as "100/s" (or "5/m", "1000/h",
        "3/10s", or a Rate); `burst`, `max_running`, `max_running_per_key` whole numbers
        from 1; `fair_by` one of "tenant", "orchestrator_id", "session_id" or "none".
        Every worker applies the change from its next claim on. Returns the limits as
        they are now. ValidationError naming the first bad value (nothing written), or
        for a type neither configured nor seen; CorruptQueueState (nothing written) if
        the limits key holds another type."""
        pairs = limit_changes(
            fair_by=fair_by,
            rate=rate,
            burst=burst,
            max_running=max_running,
            max_running_per_key=max_running_per_key,
        )
        with backend_errors(self.settings.redis):
            return await write_limits(self.connection, agent_type, pairs)

    async def limits(self, agent_type: str) -> Limits:
        """The limits of `agent_type` now (Limits: None where there is none); errors as
        for `set_limits`, and CorruptQueueState for a stored value that does not parse."""
        with backend_errors(self.settings.redis):
            return await read_limits(self.connection, agent_type)

    async def set_key_weights(
        self, agent_type: str, weights: Mapping[str, int | None]
    ) -> dict[str, int]:
        """Give fairness keys of `agent_type` a weight (queue.limits): on its turn in fair
        share's round, a key of weight w starts up to w jobs in a row (default 1), within
        its max_running_per_key. None lifts a key's weight. Live, as set_limits. Returns
        every key's weight now. ValidationError naming `key_weights` (nothing written);
        CorruptQueueState (nothing written) if the limits key holds another type."""
        pairs = weight_changes(weights)
        with backend_errors(self.settings.redis):
            return await write_key_weights(self.connection, agent_type, pairs)

    async def key_weights(self, agent_type: str) -> dict[str, int]:
        """The fairness keys of `agent_type` given a weight, and their weights."""
        with backend_errors(self.settings.redis):
            return await read_key_weights(self.connection, agent_type)

    async def fair_waits(self, agent_type: str, top: int = 5) -> FairWaits:
        """Fair share now: how many fairness keys of `agent_type` have jobs waiting, and
        the `top` that have waited longest without a start (a key held at its
        max_running_per_key waits too). Plain reads; errors as for `limits`."""
        with backend_errors(self.settings.redis):
            return await read_fair_waits(self.connection, agent_type, top)

    async def cancel(self, agent_type: str, job_id: str, reason: str | None = None) -> CancelReport:
        """Cancel one job (see queue.cancel): a waiting one now (it never starts), a
        running one by telling its worker (its attempt ends cancelled, its result is never
        stored); the report says which, or that it had finished or is unknown. Safe to
        call twice. `reason` (at most 1,000 characters) is the cancelled result's error.
        ValidationError for a bad id, reason or an agent type never seen."""
        with backend_errors(self.settings.redis):
            [report] = await cancel_jobs(self.connection, agent_type, [job_id], reason)
        return report

    async def cancel_session(
        self, session_id: str, reason: str | None = None
    ) -> list[CancelReport]:
        """Cancel every job of `session_id` (its payloads' session_id) of every agent
        type, one report per job found (see `cancel`)."""
        with backend_errors(self.settings.redis):
            return await cancel_session(self.connection, session_id, reason)

    async def ping(self) -> bool:
        """Health check: PING through the pool."""
        return await self.connection.ping()

    async def cleanup(self, agent_type: str, limit: int | None = None) -> list[str]:
        """Expire up to `limit` jobs of `agent_type` past their TTL (workers do this
        periodically; safe to call from anywhere at any time)."""
        with backend_errors(self.settings.redis):
            keys = self.connection.keys(agent_type)
            return list((await expire_due(self.connection, keys, limit)).expired)

    async def stats(self, agent_type: str) -> QueueStats:
        """Depths and counters of one agent type, read in one pipelined round trip.
        An agent type that is not configured is a ValidationError (as at enqueue)."""
        keys = self.connection.known_keys(agent_type)
        pipe = self.connection.client.pipeline(transaction=False)
        pipe.hlen(keys.queued)
        pipe.zcard(keys.waiting)
        pipe.llen(keys.processing)
        pipe.zcard(keys.delayed)
        pipe.llen(keys.dead)
        pipe.hgetall(keys.stats)
        for level in keys.level_queues:
            pipe.llen(level)
        with backend_errors(self.settings.redis):
            packed, requeued, in_progress, delayed, dead, raw, high, low = await pipe.execute()
        queued = packed + requeued
        by_priority = {"high": high, "normal": max(0, queued - high - low), "low": low}
        counters = {name: int(raw.get(name, 0)) for name in STATS_COUNTERS}
        counters[LATENCY_COUNT_FIELD] = int(raw.get(LATENCY_COUNT_FIELD, 0))
        return QueueStats(
            queued, in_progress, delayed, dead, counters, float(raw.get(LATENCY_SUM_FIELD, 0)),
            by_priority,
        )  # fmt: skip

    async def get_record(self, agent_type: str, job_id: str) -> JobRecord | None:
        """A queue job seen as a JobRecord (the JobStore's shape), or None if unknown.

        A read-only view: queue state lives in the queue's keys (one hash slot per
        agent type), never copied into a JobStore namespace. An expired job's record
        is gone; it reads as FAILED with the expiry as its error while its result lasts.
        An agent type that is not configured is a ValidationError (as at enqueue)."""
        keys = self.connection.known_keys(agent_type)
        pipe = self.connection.client.pipeline(transaction=False)
        pipe.hgetall(keys.job(job_id))
        pipe.get(keys.result(job_id))
        pipe.hget(keys.queued, job_id)
        with backend_errors(self.settings.redis):
            fields, result_text, packed = await pipe.execute()
        if not fields and packed is not None:
            fields = queued_record_fields(keys, job_id, packed)
        outcome = parse_result(agent_type, job_id, result_text) if result_text else None
        if not fields:
            if outcome is None:
                return None
            # Expired (expiry deletes the record), or finished with its record's TTL run
            # out a moment before its result's: the result says which.
            return JobRecord(
                job_id=job_id,
                status=JOB_STATUS_OF[outcome.status],
                result=_record_result(outcome),
                error=outcome.error,
            )
        payload = json.loads(fields["payload"])
        state = _queue_state(fields)
        enqueued = int(fields.get("enqueued_at", 0)) / 1000
        updated = int(fields.get("finished_at") or fields.get("started_at") or 0) / 1000
        return JobRecord(
            job_id=job_id,
            status=JobStatus.PENDING if state is None else JOB_STATUS_OF[state],
            payload=payload,
            result=_record_result(outcome),
            error=fields.get("last_error") if state in _ENDED_WITH_ERROR else None,
            created_at=enqueued,
            updated_at=max(updated, enqueued),
            version=max(1, int(fields.get("attempts", 0))),
        )

    async def aclose(self) -> None:
        await self.connection.aclose()

    async def __aenter__(self) -> JobQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _translated(
    method: Callable[Concatenate[DeadLetters, _P], Coroutine[Any, Any, _T]],
) -> Callable[Concatenate[DeadLetters, _P], Coroutine[Any, Any, _T]]:
    """`method` with its Redis failures turned into the package's errors (see JobQueue)."""

    async def translated(self: DeadLetters, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with backend_errors(self._connection.settings.redis):
            return await method(self, *args, **kwargs)

    functools.update_wrapper(translated, method)  # its name and docstring
    return translated


class _DeadLetters(DeadLetters):
    """DeadLetters whose Redis failures are the package's errors (see JobQueue)."""

    count = _translated(DeadLetters.count)
    list = _translated(DeadLetters.list)
    requeue = _translated(DeadLetters.requeue)
    purge = _translated(DeadLetters.purge)
    requeue_each = _translated(DeadLetters.requeue_each)
    purge_each = _translated(DeadLetters.purge_each)


_ENDED_WITH_ERROR = frozenset({QueueState.FAILED, QueueState.DEAD})
"""States whose record's last_error is the job's error (a RETRYING job may still succeed)."""


def _queue_state(fields: dict[str, str]) -> QueueState | None:
    """The state in a job hash; None if this version does not know it.

    No `state` field is QUEUED (enqueue writes none). An unknown one reads as PENDING
    rather than failing the read: a newer version may have written it."""
    try:
        return QueueState(fields.get("state", QueueState.QUEUED))
    except ValueError:
        return None


def _record_result(outcome: JobResult | None) -> dict[str, Any] | None:
    """A JobRecord's result: a succeeded job's value, wrapped when it is not an object."""
    if outcome is None or not outcome.ok:
        return None
    value = outcome.result
    return value if isinstance(value, dict) else {"value": value}
