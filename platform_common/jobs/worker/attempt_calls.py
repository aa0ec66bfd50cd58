"""Claim, renew, complete and fail jobs: each one script, fenced by the lease token."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from ..errors import LeaseLost
from ..keys import ARRIVAL_BUCKET_MS, MAX_ERROR_CLASSES, QueueKeys, latency_bucket_field
from ..queue.backend_errors import is_script_error
from ..queue.connection import QueueConnection
from ..queue.error_class import error_class_of
from ..queue.expiry import expire_jobs
from ..queue.log_text import MAX_TRACEBACK_LENGTH, bounded, safe_text
from ..status import AttemptOutcome, QueueState
from .coalescer import Coalescer

__all__ = [
    "LOST_EXPIRED",
    "MAX_ERROR_LENGTH",
    "MAX_TRACEBACK_LENGTH",
    "AttemptCalls",
    "Claim",
    "TypeHeldBack",
    "TypePaused",
    "lost_reason",
]  # fmt: skip

_D = TypeVar("_D")

MAX_ERROR_LENGTH = 2000
"""Longest error text kept per attempt (history and dead letters stay small)."""

MAX_COMPLETE_BATCH = 64
"""Most completions one complete script call records (it blocks Redis ~10 us per job)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A job a worker now holds under a lease."""

    job_id: str
    token: str
    """Proof of ownership: every later change of the job must present it."""
    attempt: int
    """1 for the first attempt; crashed attempts count."""
    max_attempts: int
    expires_at_ms: int
    """The job's TTL deadline (created_at + ttl_seconds), ms since the epoch."""
    payload: str
    """The payload JSON as the producer stored it."""
    redis_now_ms: int = 0
    """Redis TIME when the claim ran, ms: the worker times the attempt's deadlines from
    it (expires_at_ms - redis_now_ms is the TTL left), never from its own clock."""
    problem: str | None = None
    """Why the stored job cannot run (a field of its record does not parse), or None.
    Such a claim holds the job only so the worker can fail it with this text."""
    trace_context: str | None = None
    """The producer's trace context as the record keeps it (see queue.tracing), or None."""


class TypePaused(Exception):
    """The claim started nothing: the agent type is paused (JobQueue.pause). A job the
    worker's BLMOVE took went back to the queue; nothing else was written."""

    def __init__(self, agent_type: str) -> None:
        self.agent_type = agent_type
        super().__init__(f"agent type {agent_type!r} is paused")


_PAUSED = b"paused"
"""The claim's reply while the type is paused (read undecoded)."""

_LEVELS = b"levels"
"""The claim's reply to given jobs while a high or low job waits: they went back to the
queue, and the worker takes (queue_claim.lua, Levels)."""


class TypeHeldBack(Exception):
    """The claim started nothing: the type's limits (queue.limits) allow no start now. A
    job the worker's BLMOVE took went back to the queue; nothing else was written.
    `limit`: "rate" (the rate allows the next start in `wait` seconds) or "max_running"
    (that many of the type's jobs run: a start is allowed when one ends; `wait` None)."""

    def __init__(self, agent_type: str, limit: str, wait: float | None) -> None:
        self.agent_type = agent_type
        self.limit = limit
        self.wait = wait
        after = f": next start in {wait:.3f} s" if wait is not None else ""
        super().__init__(f"agent type {agent_type!r} is held back by its {limit}{after}")


_THROTTLED = b"throttled"
"""The claim's reply {"throttled", ms} while the rate allows no start (undecoded)."""
_CAPPED = b"capped"
"""The claim's reply {"capped"} while max_running jobs of the type run (undecoded)."""


def _held_back(agent_type: str, reply: Any) -> None:
    """Raise TypePaused or TypeHeldBack for a claim reply that started nothing so."""
    first = reply[0]
    if first == _PAUSED:
        raise TypePaused(agent_type)
    if first == _THROTTLED:
        raise TypeHeldBack(agent_type, "rate", int(reply[1]) / 1000)
    if first == _CAPPED:
        raise TypeHeldBack(agent_type, "max_running", None)


class AttemptCalls:
    """The fenced operations on one agent type's jobs."""

    def __init__(self, connection: QueueConnection, agent_type: str) -> None:
        settings = connection.settings
        self._connection = connection
        self._scripts = connection.scripts
        self._run = connection.run_script
        self.keys: QueueKeys = connection.keys(agent_type)
        self._lease_ms = int(settings.lease_seconds * 1000)
        self._backoff = list(settings.backoff_ms())
        self._retention = settings.retention_seconds()
        keys = self.keys
        self._complete_keys = [keys.processing, keys.leases, keys.expiry, keys.stats]
        self._claim_keys = (
            keys.processing, keys.leases, keys.stats, keys.expiry, keys.queue, keys.waiting,
            keys.queued, keys.arrivals, keys.arrived, keys.paused,
        )  # fmt: skip
        # The limits' keys come last, after the jobs' (queue_claim.lua: KEYS[#KEYS - 1..]).
        # Then fair share's ring (queue_claim.lua, Fair share).
        self._limit_keys = (keys.limits, keys.rate, keys.fair_ring)
        self._job_key_prefix = keys.job("")  # job key = prefix + id (a completion's hot path)
        self._result_key_prefix = keys.result("")
        self._fail_keys = [
            keys.processing, keys.leases, keys.delayed, keys.dead, keys.queue, keys.expiry,
            keys.stats,
        ]  # fmt: skip
        # The bucket bounds as queue_complete.lua takes them: m, (bound, suffix) pairs and
        # the +Inf suffix (a suffix names the bucket of each histogram: latency_le:0.5).
        self._buckets: list[Any] = [len(settings.latency_buckets)]
        for bound in (*settings.latency_buckets, float("inf")):
            suffix = latency_bucket_field(bound).removeprefix("latency")
            self._buckets += [bound, suffix] if bound != float("inf") else [suffix]
        self._completions: Coalescer[tuple[str, str, str], Any] = Coalescer(
            self._complete_batch, MAX_COMPLETE_BATCH
        )

    async def claim(
        self,
        worker_id: str,
        taken: Sequence[tuple[str, str]],
        expired: list[tuple[str, str]] | None = None,
        skipped: list[str] | None = None,
    ) -> tuple[int, list[Claim]]:
        """Start an attempt of each (job_id, token) just moved into processing.

        Returns the queue length left (1 and no claims when the jobs went back because
        a high or low job waits: then the worker takes) and the claims that run; jobs
        past their TTL are expired here (not started) and strays are dropped.
        `expired`, if given, gets (job_id, trace_context) of each job expired, the
        creation context as stored ("" if none), so the worker can log it under the
        producer's trace; `skipped`, if given, the id of each stray dropped.
        TypePaused while the type is paused, TypeHeldBack while its limits allow no
        start: the jobs went back to the queue, none was claimed (the limits may also
        claim fewer than given: the rest go back)."""
        keys = self.keys
        script_keys = list(self._claim_keys)
        args: list[Any] = [self._lease_ms, worker_id, keys.channel, ARRIVAL_BUCKET_MS, 0]
        for job_id, token in taken:
            script_keys += [keys.job(job_id), keys.result(job_id)]
            args += [job_id, token]
        # The claim's optional KEYS, in their order: the levels, then the limits.
        script_keys += [*keys.level_queues, *self._limit_keys]
        # The reply comes undecoded (QueueConnection reads the claim's as bytes).
        reply = await self._run(self._scripts.claim, script_keys, args)
        if reply[0] == _LEVELS:
            return 1, []  # a high or low job waits: the worker's next fetch takes
        if not isinstance(reply[0], int):
            _held_back(keys.agent_type, reply)
        return int(reply[0]), _claims_of(reply, expired, skipped)

    async def take(
        self,
        worker_id: str,
        tokens: Sequence[str],
        previous: str | None = None,
        expired: list[tuple[str, str]] | None = None,
        skipped: list[str] | None = None,
    ) -> tuple[int, list[Claim]]:
        """Take up to len(tokens) jobs off the queue and claim them, in one script call
        (no LMOVE round trip before the claim): the i-th job taken gets tokens[i].
        Returns and raises what claim() does (a replay still hands back what its first
        run took); nothing is taken when the claim is refused (CorruptQueueState), so no
        job waits for the reaper then.

        Safe to call again with the same tokens after a lost reply (a dropped
        connection): the call's marker, named by tokens[0], makes the second call hand
        back the jobs the first took instead of taking more. `previous`: tokens[0] of
        this worker's last take whose reply came (its marker is deleted); `expired` and
        `skipped` as for claim()."""
        keys = self.keys
        marker = self.take_marker(tokens[0])
        script_keys = [
            *self._claim_keys,
            marker,
            self.take_marker(previous) if previous else marker,
            *keys.level_queues,  # the claim's optional KEYS: the levels, then the limits
            *self._limit_keys,
        ]
        args: list[Any] = [
            self._lease_ms, worker_id, keys.channel, ARRIVAL_BUCKET_MS, len(tokens),
            self._job_key_prefix, self._result_key_prefix, *tokens,
        ]  # fmt: skip
        # (A job key it reads is refused by name: backend_errors.corrupt_reply.)
        reply = await self._run(self._scripts.claim, script_keys, args)
        if not isinstance(reply[0], int):
            _held_back(keys.agent_type, reply)
        return int(reply[0]), _claims_of(reply, expired, skipped)

    def take_marker(self, call: str) -> str:
        """The key of a take's marker (see queue_claim.lua), `call` its first token."""
        return self.keys.take(call)

    def complete_call(self, jobs: Sequence[tuple[str, str, str]]) -> tuple[list[str], list[Any]]:
        """(keys, args) of one complete script call for (job_id, token, result_json)s."""
        job_key, result_key = self._job_key_prefix, self._result_key_prefix
        script_keys = list(self._complete_keys)
        args: list[Any] = [self.keys.channel, *self._buckets]
        for job_id, token, result_json in jobs:
            script_keys += [job_key + job_id, result_key + job_id]
            args += [job_id, token, result_json]
        script_keys.append(self.keys.cancels)  # queue_complete.lua: KEYS[#KEYS]
        return script_keys, args

    async def complete(self, job_id: str, token: str, result_json: str) -> AttemptOutcome:
        """Store the result (with the job's TTL), count, publish. LeaseLost if the token
        no longer owns the job; a retried call that already succeeded is a no-op (REPLAY).
        CANCELLED: the job was asked to cancel, so it ended cancelled, the result unstored.

        Completions issued close together (by concurrent callers) share one script call;
        each keeps its own fencing and its own outcome."""
        reply = await self._completions.submit((job_id, token, result_json))
        if reply[0] == AttemptOutcome.LOST:
            raise LeaseLost(job_id, lost_reason(await self.lost_state(job_id, reply[1])))
        return AttemptOutcome(reply[0])

    async def _complete_batch(self, jobs: list[tuple[str, str, str]]) -> list[Any]:
        """One complete script call for `jobs`: each job's reply entry, or its refusal
        (CorruptQueueState naming its job key). A script error of the whole call (a
        shared key or a stats field refused, or the script failing) is raised for a
        single job; for several, each job is tried alone, so that only the jobs it
        concerns fail (a worker fails those)."""
        keys, args = self.complete_call(jobs)
        try:
            entries = await self._run(self._scripts.complete, keys, args)
        except ResponseError as exc:
            if len(jobs) == 1 or not is_script_error(exc):
                raise
            replies: list[Any] = []
            for job in jobs:
                try:
                    replies += await self._complete_batch([job])
                except ResponseError as alone:
                    if not is_script_error(alone):
                        raise
                    replies.append(alone)
            return replies
        for index, entry in enumerate(entries):
            if isinstance(entry, ResponseError):
                entries[index] = await self._connection.refusal(entry, keys)
        return list(entries)

    async def fail(
        self,
        job_id: str,
        token: str,
        error: str,
        *,
        mode: str = "error",
        traceback: str = "",
        error_class: str | None = None,
    ) -> AttemptOutcome | QueueState:
        """End the attempt unsuccessfully. mode "error" retries with backoff (or
        dead-letters after the last attempt), "fatal" fails without retry, "corrupt"
        dead-letters at once (the stored job does not parse), "release" gives the attempt
        back unstarted. `error` (and `traceback`, if any) go into the job's history, made
        safe and bounded. `error_class` is the exception's class the attempt is counted
        under (default: taken from `error`, see error_class_of). Returns the outcome, or
        for a replay the state the first call left the job in; LeaseLost as above."""
        reply = await self._run(
            self._scripts.fail,
            *self.fail_call(job_id, token, error, mode, traceback, error_class),
        )
        outcome = AttemptOutcome(reply[0])
        if outcome == AttemptOutcome.LOST:
            raise LeaseLost(job_id, lost_reason(await self.lost_state(job_id, reply[1])))
        if outcome == AttemptOutcome.REPLAY:
            return QueueState(reply[1])
        return outcome

    def fail_call(
        self,
        job_id: str,
        token: str,
        error: str,
        mode: str,
        traceback: str = "",
        error_class: str | None = None,
    ) -> tuple[list[str], list[Any]]:
        """(keys, args) of the fail script. The texts are made valid UTF-8 (a lone
        surrogate would make the call itself fail) and cut to their bounds."""
        keys = self.keys
        error = bounded(safe_text(error), MAX_ERROR_LENGTH)
        traceback = bounded(safe_text(traceback), MAX_TRACEBACK_LENGTH, keep_end=True)
        error_class = error_class or error_class_of(error, mode)
        return (
            [*self._fail_keys, keys.job(job_id), keys.result(job_id), keys.waiting, keys.failed,
             *keys.level_queues, keys.cancels, keys.fair_ring],
            [job_id, mode, token, error, keys.channel, *self._backoff, traceback, self._retention,
             error_class, MAX_ERROR_CLASSES],
        )  # fmt: skip

    async def renew(self, held: Sequence[tuple[str, str]]) -> list[str]:
        """Extend the leases of (job_id, token) pairs; returns the job ids lost."""
        if not held:
            return []
        keys = self.keys
        args: list[Any] = [self._lease_ms]
        for job_id, token in held:
            args += [job_id, token]
        lost = await self._run(
            self._scripts.renew, [keys.leases, *(keys.job(j) for j, _ in held)], args
        )
        return [str(job_id) for job_id in lost]

    async def lost_state(self, job_id: str, state: Any = None) -> str:
        """Where a job is whose lease this worker lost: `state`, the state a script
        reported (read here when not given), or for a record that is gone ("missing")
        how its result says it ended (expiry deletes the record and keeps an "expired"
        result): so a worker whose job was expired by another worker's cleanup says
        "expired", as Redis counted it, not "lost". Read only on a loss, never on the
        hot path; "missing" when nothing says more."""
        if state is None:
            state = await self._connection.client.hget(self.keys.job(job_id), "state")  # type: ignore[misc]
        if state is not None and _text(state) != "missing":
            return _text(state)
        try:
            stored = await self._connection.client.get(self.keys.result(job_id))
            status = json.loads(stored)["status"] if stored is not None else None
        except (ResponseError, ValueError, TypeError, KeyError):
            # (a result key of another type, or a value that is not the queue's JSON)
            return "missing"
        return status if isinstance(status, str) and status else "missing"

    async def expire(self, job_ids: Sequence[str]) -> list[str]:
        """Expire the given jobs if their TTL has passed; returns those expired."""
        report = await expire_jobs(self._run, self._scripts.expire, self.keys, job_ids)
        return list(report.expired)


_HELD = ("run", "corrupt")
"""The kinds of claim reply entry that hold a job (the others expired or were skipped)."""

PAYLOAD_NOT_UTF8 = "stored payload of the job is not valid UTF-8"


def lost_reason(state: str) -> str:
    """The LeaseLost reason naming where the job is now."""
    return f"lease lost (job is {state})"


LOST_EXPIRED = lost_reason(QueueState.EXPIRED)
"""The reason of a lease lost because the job's TTL passed and it was expired elsewhere."""


def _claims_of(
    reply: list[Any], expired: list[tuple[str, str]] | None, skipped: list[str] | None = None
) -> list[Claim]:
    """The claims of a claim script's reply; each job it expired added to `expired`, each
    stray it dropped to `skipped`."""
    claims = []
    for entry in reply[1:]:
        kind = _text(entry[1])
        if kind in _HELD:
            claims.append(_claim_of(entry))
        elif kind == "skip" and skipped is not None:
            skipped.append(_text(entry[0]))
        elif kind == "expired" and expired is not None:
            expired.append((_text(entry[0]), _trace_context(entry, 2) or ""))
    return claims


def _claim_of(entry: list[Any]) -> Claim:
    """A claim from its reply entry, read undecoded: the script returns payloads and
    trace contexts as stored, unchecked (a Lua scan of every byte cost a third of the
    claim), so they are decoded here, each on its own. A field that does not parse, or
    a payload that is not UTF-8, makes a claim with a `problem` (the worker fails the
    job with it), never an error that loses the claim's other jobs; a trace context
    that is not UTF-8 is dropped (tracing never stops a job)."""
    job_id, kind, token = _text(entry[0]), _text(entry[1]), _text(entry[2])
    if kind == "corrupt":  # {job_id, "corrupt", token, problem, now}
        return Claim(job_id, token, 0, 0, 0, "", _int_or(entry[4], 0), _text(entry[3]))
    # {job_id, "run", token, attempts, max_attempts, expires_at, payload, now, trace_context}
    now_ms = _int_or(entry[7] if len(entry) > 7 else None, 0)
    try:
        attempt, max_attempts, expires_at_ms = int(entry[3]), int(entry[4]), int(entry[5])
    except (TypeError, ValueError):
        numbers = {"attempts": entry[3], "max_attempts": entry[4], "expires_at": entry[5]}
        bad = next(name for name, value in numbers.items() if _int_or(value, None) is None)
        shown = _text(numbers[bad]) if isinstance(numbers[bad], bytes) else numbers[bad]
        problem = f"stored field {bad!r} of the job does not parse: {shown!r:.60}"
        return Claim(job_id, token, 0, 0, 0, "", now_ms, problem)
    carried = _trace_context(entry, 8)
    try:
        payload = _decoded(entry[6])
    except UnicodeDecodeError:
        # The attempt numbers parsed: kept, so the log line says attempt=1/3, not ?/?.
        return Claim(
            job_id, token, attempt, max_attempts, expires_at_ms, "", now_ms, PAYLOAD_NOT_UTF8,
            carried,
        )  # fmt: skip
    return Claim(
        job_id, token, attempt, max_attempts, expires_at_ms, payload, now_ms,
        trace_context=carried,
    )  # fmt: skip


def _decoded(value: Any) -> Any:
    """Bytes of the reply decoded as UTF-8 (UnicodeDecodeError if they are not); any
    other value (a nil, or a str of a decoded reply) as it is."""
    return value.decode() if isinstance(value, bytes) else value


def _trace_context(entry: list[Any], index: int) -> Any:
    """The trace context at `index` of a reply entry; None if absent or not UTF-8."""
    try:
        return _decoded(entry[index]) if len(entry) > index else None
    except UnicodeDecodeError:
        return None


def _text(value: Any) -> str:
    """A reply value the script wrote itself (ids, kinds, problems) as text."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _int_or(value: Any, default: _D) -> int | _D:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
