"""Enqueue jobs: validated, written with their counters in one script, nothing on refusal."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from opentelemetry.trace import Span, TracerProvider
from redis.exceptions import OutOfMemoryError, ResponseError

from ..errors import BackendOutOfMemory, InvalidPayload
from ..keys import ARRIVAL_BUCKET_MS, EXPIRY_BUCKET_MS, QueueKeys
from ..validation import MAX_CLOCK_SKEW_SECONDS
from .backend_errors import backend_errors, out_of_memory
from .connection import QueueConnection
from .payload import JobPayload, PreparedJob, prepare_job
from .priority import DEFAULT_PRIORITY, Priority, priority_code, priority_of
from .schedule import Schedule, late, schedule_of
from .tracing import QueueTracing, server_attributes

__all__ = ["ENQUEUE_CHUNK", "ROUND_TRIP_BYTES", "Producer"]

ENQUEUE_CHUNK = 500
"""Jobs per enqueue script call in enqueue_many: big enough to amortise the round trip,
small enough that one call never holds Redis for long."""

ROUND_TRIP_BYTES = 8 * 1024 * 1024
"""Payload bytes per enqueue_many round trip, about: a few of them fit well within the
reply timeout on any network, and the round trip still amortises."""

Job = Mapping[str, Any] | JobPayload

_SKEW_MS = MAX_CLOCK_SKEW_SECONDS * 1000
_BUCKETS = (EXPIRY_BUCKET_MS, ARRIVAL_BUCKET_MS)
_NO_FAIRNESS = "0:0:0:"
"""A job without fairness values, in a call where another has some."""


class _ScriptKeys:
    """The enqueue script's keys of one agent type, built once: the shared ones, and the
    prefixes each job's own keys are concatenated from (building them with QueueKeys's
    f-strings cost three times as much, for every job of a lone enqueue)."""

    __slots__ = ("bucket", "fair", "job", "levels", "result", "scheduled", "shared")

    def __init__(self, keys: QueueKeys) -> None:
        self.shared = [
            keys.queue, keys.stats, keys.queued, keys.expiring, keys.arrivals, keys.arrived,
            keys.deadline_mark,
        ]  # fmt: skip
        """The keys shared by every job of a call."""
        self.scheduled = [keys.delayed, keys.expiry]
        """The keys a scheduled call adds after every job's own."""
        self.levels = {level: [keys.level_queue(level)] for level in ("high", "low")}
        """The key a call of priority high or low adds after the scheduled ones."""
        self.fair = [keys.delayed, keys.expiry, keys.level_queue("high"), keys.limits]
        self.fair.append(keys.fair_ring)
        """The keys a call with fairness values adds after every job's own (the scheduled
        slots, used by a scheduled call, and the level's, unused): the limits hash, whose
        fair_by the script reads, and fair share's ring."""
        self.job = keys.job("")
        self.result = keys.result("")
        self.bucket = keys.expiring_bucket(0).removesuffix("0")
        sample = PreparedJob("j", keys.agent_type, b"", 1_234_567, 60)
        expected = [keys.job("j"), keys.result("j"), keys.expiring_bucket(1_294_567)]
        if self.own(sample) != expected:
            raise AssertionError("keys.py changed its layout: update producer._ScriptKeys")

    def own(self, job: PreparedJob) -> list[str]:
        """The keys of `job`: its record, result and expiry bucket (used only if the job
        is out of deadline order)."""
        expires_at_ms = job.created_at_ms + job.ttl_seconds * 1000
        return [
            self.job + job.job_id,
            self.result + job.job_id,
            self.bucket + str(expires_at_ms - expires_at_ms % EXPIRY_BUCKET_MS),
        ]


class Producer:
    """Puts jobs on their agent type's queue (LPUSH side)."""

    def __init__(
        self, connection: QueueConnection, *, tracer_provider: TracerProvider | None = None
    ) -> None:
        self._connection = connection
        self._settings = connection.settings
        self._tracing = QueueTracing(
            tracer_provider, server=server_attributes(self._settings.redis)
        )
        # A nonce per call lets a call retried after a lost reply recognise its own
        # writes; a process prefix plus a counter is unique without a syscall per job.
        self._nonce_prefix = os.urandom(6).hex()
        self._counter = itertools.count()
        # Per agent type, built once: the hot path of enqueue then builds only the
        # keys and arguments of its job.
        self._script_keys: dict[str, _ScriptKeys] = {}
        self._backend_errors = backend_errors(self._settings.redis)

    @property
    def trace_context_dropped(self) -> dict[str, int]:
        """What the trace context bounds dropped of the contexts this producer sent, by
        cause (see queue.trace_context; each drop is also logged, rate-limited)."""
        return self._tracing.dropped

    def _nonce(self) -> str:
        return f"{self._nonce_prefix}:{next(self._counter)}"

    def _prepare(self, job: object) -> PreparedJob:
        return prepare_job(
            job, agent_types=self._settings.agent_types, max_bytes=self._settings.max_payload_bytes
        )

    async def enqueue(
        self,
        job: Job,
        *,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: Priority | None = None,
    ) -> str:
        """Validate and enqueue one job; returns its job_id.

        `priority` is "high", "normal" (the default) or "low" (queue.priority): a worker
        takes the highest level that has jobs waiting, bar its fair turns, and the job
        keeps its level through retries.

        `delay` (seconds, or a timedelta) or `run_at` (an aware datetime) schedules it
        (queue.schedule): it waits in the delayed set until then, and must be due before
        its own expiry (created_at + ttl_seconds), else it is refused.

        Raises InvalidPayload naming every bad field (including a job_id that is
        taken: queued, running, or ended with its result still held, a created_at more
        than MAX_CLOCK_SKEW_SECONDS ahead of Redis' clock, a created_at + ttl_seconds
        already past by Redis' clock, and a `delay` or `run_at` that is not one or
        would make it due at or after its expiry, and a `priority` that is not a level);
        nothing is written then. BackendUnavailable if Redis cannot be reached
        (BackendBusy if the pool stayed full, BackendOutOfMemory if Redis is at
        maxmemory), CorruptQueueState if a queue key holds something the queue did not
        write; nothing is written then either."""
        schedule = schedule_of(delay, run_at)
        level = priority_of(priority)
        prepared = self._prepare(job)
        deadline_ms = _deadline_ms(prepared)
        if schedule is not None and schedule.at_ms is not None and schedule.at_ms >= deadline_ms:
            refusal = late(prepared.job_id, deadline_ms, schedule.at_ms, schedule)
            raise InvalidPayload({"run_at": refusal})
        span = self._tracing.start_send(prepared.agent_type)
        try:
            with self._backend_errors:
                return await self._enqueue(prepared, span, schedule, level)
        except BaseException as exc:
            self._tracing.send_failed(span, exc)
            raise
        finally:
            span.end()

    async def _enqueue(
        self, prepared: PreparedJob, span: Span, schedule: Schedule | None, level: Priority
    ) -> str:
        connection = self._connection
        agent_type = prepared.agent_type
        if agent_type not in connection.registered_types:
            await self._register(agent_type)
        job_id = prepared.job_id
        self._tracing.sent(span, job_id)
        type_keys = self._type_keys(agent_type)
        script_keys = [*type_keys.shared, *type_keys.own(prepared)]
        created_ms = prepared.created_at_ms
        deadline_ms = created_ms + prepared.ttl_seconds * 1000
        args = [self._nonce(), 1, created_ms - _SKEW_MS, deadline_ms, *_BUCKETS]
        args += self._job_args(prepared)
        context = self._tracing.creation_context(span)
        if level != DEFAULT_PRIORITY:
            # Levels: the schedule's slots (given, even unused), then the level's list.
            script_keys += [*type_keys.scheduled, *type_keys.levels[level]]
            args += [context, schedule.argument if schedule else "", priority_code(level)]
        elif prepared.fairness:
            # Fair share: the script routes the job by its limits' fair_by (one HGET); a
            # scheduled one keeps its key for the promoter.
            script_keys += type_keys.fair
            args += [context, schedule.argument if schedule else "", "", prepared.fairness]
        elif schedule is not None:
            script_keys += type_keys.scheduled
            args += [context, schedule.argument]
        elif context:  # none at all is no argument (the script keeps none either way)
            args.append(context)
        # Eager: a lone enqueue goes out from this task at once (the script recognises
        # its own replay by nonce, so a cut round trip is safe to repeat).
        reply = await connection.run_script(
            connection.scripts.enqueue, script_keys, args, eager=True
        )
        if reply[0] == "duplicate":
            raise InvalidPayload({"job_id": f"job {job_id!r} already exists"})
        if reply[0] == "ahead":
            raise InvalidPayload({"created_at": _ahead(prepared, int(reply[1]))})
        if reply[0] == "expired":
            raise InvalidPayload({"ttl_seconds": _past(prepared, int(reply[1]))})
        if reply[0] == "late":
            assert schedule is not None
            due = late(job_id, deadline_ms, int(reply[2]), schedule)
            raise InvalidPayload({_schedule_field(schedule): due})
        return job_id

    async def enqueue_many(
        self,
        jobs: Iterable[Job],
        *,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: Priority | Sequence[Priority | None] | None = None,
    ) -> list[str]:
        """Validate every job, then enqueue them all, pipelined; returns their job_ids.

        `priority` is one level for the whole batch, or a sequence of one level per job
        (`jobs[i]`'s is `priority[i]`), as for enqueue; a level that is not one, or a
        sequence of another length, refuses the batch (`priority` or `priority[i]`).

        `delay` or `run_at` schedules every job of the batch, as for enqueue; a job it
        would make due at or after its expiry refuses the batch (`jobs[i].run_at`, or
        for a delay, judged by Redis' clock, the chunk holding it: `jobs[i].delay`).

        All or nothing: an invalid job anywhere (errors keyed `jobs[i].field`), a
        job_id twice in the batch, a job_id that is taken, a created_at too far ahead of
        Redis' clock or a created_at + ttl_seconds already past by it refuses the whole
        batch before anything is written. Only a concurrent producer enqueuing the same
        job_id at the same instant, or a job's deadline passing while the batch is
        written, can slip between the check and the write; then the chunk holding it
        (ENQUEUE_CHUNK jobs of one type; for a deadline, every chunk run after it passed)
        is refused atomically and InvalidPayload says which ids were not written. Each
        chunk is one script, all or nothing: if Redis reaches maxmemory partway,
        BackendOutOfMemory lists the job ids `written` (earlier chunks) and
        `not_written`, so a retry sends only the latter."""
        schedule = schedule_of(delay, run_at)
        batch: list[object] = list(jobs)
        levels = _levels_of(priority, len(batch))
        prepared, errors = self._prepare_batch(batch)
        if schedule is not None and schedule.at_ms is not None:
            for index, job in prepared:
                if schedule.at_ms >= _deadline_ms(job):
                    errors[f"jobs[{index}].run_at"] = late(
                        job.job_id, _deadline_ms(job), schedule.at_ms, schedule
                    )
        if errors:
            raise InvalidPayload(errors)
        agent_types = {job.agent_type for _, job in prepared}
        span = self._tracing.start_send(
            next(iter(agent_types)) if len(agent_types) == 1 else None,
            batch_size=len(prepared),
        )
        try:
            with self._backend_errors:
                return await self._enqueue_many(prepared, agent_types, span, schedule, levels)
        except BaseException as exc:
            self._tracing.send_failed(span, exc)
            raise
        finally:
            span.end()

    async def _enqueue_many(
        self,
        prepared: list[tuple[int, PreparedJob]],
        agent_types: set[str],
        span: Span,
        schedule: Schedule | None,
        levels: list[Priority],
    ) -> list[str]:
        chunks = self._chunks(prepared, levels)
        await self._refuse_existing(chunks)
        connection = self._connection
        for agent_type in agent_types:
            await self._register(agent_type)
        # The bounds of the whole batch: every chunk refuses if any job is out of them.
        window = (
            max((job.created_at_ms for _, job in prepared), default=0) - _SKEW_MS,
            min((_deadline_ms(job) for _, job in prepared), default=0),
        )
        carried = self._tracing.creation_context(span, batch=True)
        replies: list[Any] = []
        for group in _round_trips(chunks):
            replies += await connection.run_script_many(
                connection.scripts.enqueue,
                self._enqueue_calls(group, window, carried, schedule, levels),
            )
        written: list[str] = []
        refused: dict[str, str] = {}
        failures: list[BaseException] = []
        for (_, chunk), reply in zip(chunks, replies, strict=True):
            if isinstance(reply, BaseException):
                failures.append(reply)
            elif reply[0] == "ok":
                written += [job.job_id for _, job in chunk]
            elif reply[0] == "duplicate":
                for index, job in chunk:
                    refused[f"jobs[{index}].job_id"] = (
                        f"job {job.job_id!r} already exists"
                        if job.job_id in reply[1:]
                        else "not written: its chunk held a duplicate"
                    )
            elif reply[0] == "ahead":
                now_ms = int(reply[1])
                for index, job in chunk:
                    ahead = job.created_at_ms - now_ms > _SKEW_MS
                    refused[f"jobs[{index}].created_at"] = (
                        _ahead(job, now_ms) if ahead
                        else "not written: the batch held a created_at ahead of Redis' clock"
                    )  # fmt: skip
            elif reply[0] == "late":
                assert schedule is not None
                due_ms, name = int(reply[2]), _schedule_field(schedule)
                for index, job in chunk:
                    refused[f"jobs[{index}].{name}"] = (
                        late(job.job_id, _deadline_ms(job), due_ms, schedule)
                        if _deadline_ms(job) <= due_ms
                        else f"not written: its chunk held a job {name} makes due after its expiry"
                    )  # fmt: skip
            else:  # "expired"
                now_ms = int(reply[1])
                for index, job in chunk:
                    refused[f"jobs[{index}].ttl_seconds"] = (
                        _past(job, now_ms) if _deadline_ms(job) <= now_ms
                        else "not written: the batch held a job already past by Redis' clock"
                    )  # fmt: skip
        if failures:
            self._raise_partial(failures, written, prepared)
        if refused:
            raise InvalidPayload(refused)
        return [job.job_id for _, job in prepared]

    @staticmethod
    def _raise_partial(
        failures: list[BaseException], written: list[str], prepared: list[tuple[int, PreparedJob]]
    ) -> None:
        """Raise a chunk's error; at maxmemory, with the ids written and not written."""
        for failure in failures:
            if isinstance(failure, BackendOutOfMemory):
                done = set(written)
                raise BackendOutOfMemory(
                    str(failure),
                    written=written,
                    not_written=[job.job_id for _, job in prepared if job.job_id not in done],
                ) from failure
        raise failures[0]

    async def _register(self, agent_type: str) -> None:
        try:
            await self._connection.register_type(agent_type)
        except OutOfMemoryError as exc:
            if isinstance(exc, BackendOutOfMemory):
                raise
            raise out_of_memory(self._settings.redis, exc) from exc

    def _enqueue_calls(
        self,
        chunks: list[tuple[str, list[tuple[int, PreparedJob]]]],
        window: tuple[int, int],
        trace_context: str,
        schedule: Schedule | None,
        levels: list[Priority],
    ) -> Iterator[tuple[list[str], list[Any]]]:
        """The enqueue script's (keys, args) per chunk, built only when it is sent; every
        job of the batch carries the batch's trace context (and schedule), every chunk
        the batch's window (the earliest Redis time it may run at, the earliest
        deadline)."""
        for agent_type, chunk in chunks:
            type_keys = self._type_keys(agent_type)
            script_keys = list(type_keys.shared)
            args: list[Any] = [self._nonce(), len(chunk), *window, *_BUCKETS]
            for _, job in chunk:
                script_keys += type_keys.own(job)
                args += self._job_args(job)
            args.append(trace_context)
            # Levels: a chunk holds jobs of one level (_chunks), the first one's is theirs.
            level = levels[chunk[0][0]] if chunk else DEFAULT_PRIORITY
            if level != DEFAULT_PRIORITY:
                script_keys += [*type_keys.scheduled, *type_keys.levels[level]]
                args += [schedule.argument if schedule else "", priority_code(level)]
            elif any(job.fairness for _, job in chunk):
                # Fair share: every job's values, "" read as none each (0: per field).
                script_keys += type_keys.fair
                fairness = (job.fairness or _NO_FAIRNESS for _, job in chunk)
                args += [schedule.argument if schedule else "", "", "".join(fairness)]
            elif schedule is not None:
                script_keys += type_keys.scheduled
                args.append(schedule.argument)
            yield script_keys, args

    def _type_keys(self, agent_type: str) -> _ScriptKeys:
        type_keys = self._script_keys.get(agent_type)
        if type_keys is None:
            keys = self._connection.keys(agent_type)
            type_keys = self._script_keys[agent_type] = _ScriptKeys(keys)
        return type_keys

    def _job_args(self, job: PreparedJob) -> list[Any]:
        return [
            job.job_id,
            job.encoded,
            job.ttl_seconds,
            job.created_at_ms,
            self._settings.max_attempts,
        ]

    def _prepare_batch(
        self, jobs: list[object]
    ) -> tuple[list[tuple[int, PreparedJob]], dict[str, str]]:
        prepared: list[tuple[int, PreparedJob]] = []
        errors: dict[str, str] = {}
        seen: dict[tuple[str, str], int] = {}
        for index, job in enumerate(jobs):
            try:
                ready = self._prepare(job)
            except InvalidPayload as exc:
                for name, problem in exc.errors.items():
                    errors[f"jobs[{index}].{name}"] = problem
                continue
            identity = (ready.agent_type, ready.job_id)
            if identity in seen:
                errors[f"jobs[{index}].job_id"] = f"duplicate of jobs[{seen[identity]}]"
            else:
                seen[identity] = index
            prepared.append((index, ready))
        return prepared, errors

    @staticmethod
    def _chunks(
        prepared: list[tuple[int, PreparedJob]], levels: list[Priority] | None = None
    ) -> list[tuple[str, list[tuple[int, PreparedJob]]]]:
        """Chunks of one agent type and one priority level each (a script call takes one
        level), in the batch's order within each."""
        by_type: dict[tuple[str, Priority], list[tuple[int, PreparedJob]]] = {}
        for item in prepared:
            level = levels[item[0]] if levels else DEFAULT_PRIORITY
            by_type.setdefault((item[1].agent_type, level), []).append(item)
        return [
            (agent_type, items[start : start + ENQUEUE_CHUNK])
            for (agent_type, _), items in by_type.items()
            for start in range(0, len(items), ENQUEUE_CHUNK)
        ]

    async def _refuse_existing(
        self, chunks: list[tuple[str, list[tuple[int, PreparedJob]]]]
    ) -> None:
        """One round trip: EXISTS over each chunk's job and result keys (one slot per
        chunk). An id is taken while its record or its result exists."""
        if not chunks:
            return
        connection = self._connection
        commands: list[tuple[Any, ...]] = []
        for agent_type, chunk in chunks:
            commands.append(("EXISTS", *_job_keys(connection, agent_type, chunk)))
            queued = connection.keys(agent_type).queued
            commands.append(("HMGET", queued, *(job.job_id for _, job in chunk)))
        replies = await connection.execute_many(commands)
        for command, reply in zip(commands, replies, strict=True):
            if isinstance(reply, ResponseError):  # WRONGTYPE: name the key
                raise await connection.refusal(reply, [str(command[1])])
            if isinstance(reply, Exception):
                raise reply
        errors: dict[str, str] = {}
        for c, (agent_type, chunk) in enumerate(chunks):
            count, waiting = replies[2 * c], replies[2 * c + 1]
            if not count and not any(value is not None for value in waiting):
                continue
            found = await connection.execute_many(
                [("EXISTS", *_job_keys(connection, agent_type, [item])) for item in chunk]
            )
            for (index, job), exists, queued in zip(chunk, found, waiting, strict=True):
                if exists or queued is not None:
                    errors[f"jobs[{index}].job_id"] = f"job {job.job_id!r} already exists"
        if errors:
            raise InvalidPayload(errors)


def _levels_of(priority: object, count: int) -> list[Priority]:
    """One level per job of a batch of `count`: `priority` is one level (or None) for all,
    or a sequence of one per job; InvalidPayload naming `priority` (or `priority[i]`)."""
    if priority is None or isinstance(priority, str):
        return [priority_of(priority)] * count
    if not isinstance(priority, Sequence) or isinstance(priority, bytes | bytearray):
        priority_of(priority)  # raises, naming what it got
    given = list(priority)  # type: ignore[call-overload]
    if len(given) != count:
        raise InvalidPayload(
            {"priority": f"gives {len(given)} levels for {count} jobs: give one per job, or one"}
        )
    levels: list[Priority] = []
    errors: dict[str, str] = {}
    for index, level in enumerate(given):
        try:
            levels.append(priority_of(level))
        except InvalidPayload as exc:
            errors[f"priority[{index}]"] = exc.errors["priority"]
    if errors:
        raise InvalidPayload(errors)
    return levels


def _round_trips(
    chunks: list[tuple[str, list[tuple[int, PreparedJob]]]],
) -> Iterator[list[tuple[str, list[tuple[int, PreparedJob]]]]]:
    """The chunks in groups of about ROUND_TRIP_BYTES of payload, one round trip each: a
    batch of 800 MB sent at once took longer than the client's reply timeout."""
    group: list[tuple[str, list[tuple[int, PreparedJob]]]] = []
    size = 0
    for chunk in chunks:
        group.append(chunk)
        size += sum(len(job.encoded) for _, job in chunk[1])
        if size >= ROUND_TRIP_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group


def _job_keys(
    connection: QueueConnection, agent_type: str, chunk: list[tuple[int, PreparedJob]]
) -> Iterator[str]:
    """The record and result key of every job of `chunk`."""
    keys = connection.keys(agent_type)
    for _, job in chunk:
        yield keys.job(job.job_id)
        yield keys.result(job.job_id)


def _deadline_ms(job: PreparedJob) -> int:
    return job.created_at_ms + job.ttl_seconds * 1000


def _schedule_field(schedule: Schedule) -> str:
    """The argument a refusal of `schedule` names."""
    return "run_at" if schedule.at_ms is not None else "delay"


def _past(job: PreparedJob, redis_now_ms: int) -> str:
    seconds = (redis_now_ms - _deadline_ms(job)) / 1000
    return (
        f"job {job.job_id!r}: created_at + ttl_seconds is already in the past, {seconds:.0f} s "
        "before Redis' clock (a worker would expire it unrun)"
    )


def _ahead(job: PreparedJob, redis_now_ms: int) -> str:
    seconds = (job.created_at_ms - redis_now_ms) / 1000
    return (
        f"job {job.job_id!r}: created_at lies {seconds:.0f} s ahead of Redis' clock; at most "
        f"{MAX_CLOCK_SKEW_SECONDS} s (MAX_CLOCK_SKEW_SECONDS) is allowed"
    )
