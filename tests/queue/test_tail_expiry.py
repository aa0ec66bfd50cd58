"""Expiry from the queue list's tail (Chores.cleanup -> expiry.expire_in_order ->
lua/queue_expire_tail.lua) of the jobs packed in `queued` that were written in deadline
order (",o" in their header) and so have no expiry bucket: the walk from the tail
expires every job past its deadline, passes over the entries it must keep (an unordered
job, a job waiting with a job hash, a value that does not parse), drops stale entries
at the very tail, and stops at the first ordered job not yet due. Then the fault
injection: a key of another type or a count that is not an integer is refused naming
the key, with the whole keyspace unchanged.

The packed values are planted directly (HSET queued, LPUSH queue, the arrival count),
as lua/queue_enqueue.lua writes them: a test decides which job is ordered and when each
is due, whatever the enqueue would choose."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from platform_common.jobs import CorruptQueueState
from platform_common.jobs.keys import ARRIVAL_BUCKET_MS, WAKE_MARKER, QueueKeys
from platform_common.jobs.queue import QueueState
from platform_common.jobs.queue.expiry import (
    ExpireReport,
    expire_in_order,
)
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import Chores
from tests.support.keyspace import changed_keys
from tests.support.queue_env import QueueEnv

pytestmark = [
    pytest.mark.cluster_sample(planted=("kind", "value")),
    pytest.mark.queue(cleanup_interval=60, register=("dining",)),
]

DINING = QueueKeys("dining")
TTL = 600
DUE = -1_000
"""A deadline a second in Redis' past (ms from now)."""
AHEAD = 600_000
"""A deadline ten minutes ahead."""


@dataclass
class Env(QueueEnv):
    async def plant(
        self,
        job_id: str,
        deadline: int,
        *,
        ordered: bool = True,
        header: str | None = None,
        trace: str = "",
    ) -> int:
        """Enqueue `job_id` packed, its deadline `deadline` ms from Redis' now, at the
        list's head, as the enqueue writes it; `header` replaces the header line, `trace`
        is its trace context line. Returns its arrival second."""
        expires_at = await self.redis_ms() + deadline
        enqueued_at = expires_at - TTL * 1000
        if header is None:
            header = f"{enqueued_at},{expires_at},{TTL},3,test:{job_id}" + (",o" if ordered else "")
        second = enqueued_at - enqueued_at % ARRIVAL_BUCKET_MS
        await self.raw.hset(DINING.queued, job_id, f"{header}\n{trace}\n{{}}")
        await self.raw.lpush(DINING.queue, job_id)
        await self.raw.hincrby(DINING.arrived, str(second), 1)
        await self.raw.zadd(DINING.arrivals, {str(second): second})
        return second

    async def plant_waiting(self, job_id: str, *, in_waiting: bool = True) -> None:
        """A job that waits with a job hash (released, promoted, requeued): its entry is
        queue_expire.lua's to expire, never the tail walk's."""
        await self.raw.hset(DINING.job(job_id), mapping={"state": "queued", "payload": "{}"})
        if in_waiting:
            await self.raw.zadd(DINING.waiting, {job_id: await self.redis_ms()})
        await self.raw.lpush(DINING.queue, job_id)

    async def listed(self) -> list[str]:
        """The queue list, head to tail."""
        listed: list[str] = await self.raw.lrange(DINING.queue, 0, -1)
        return listed

    async def counter(self, name: str) -> int:
        return (await self.queue.stats("dining")).counters[name]

    async def tail(self, **bounds: int) -> ExpireReport:
        """One run of the tail walk alone (the cleanup runs the other expiries too)."""
        connection = self.queue.connection
        return await expire_in_order(
            connection.run_script, connection.execute_many, connection.refusal,
            connection.scripts.expire_tail, DINING, **bounds,
        )  # fmt: skip

    async def script(self, offset: int, ids: Sequence[str]) -> Any:
        """The script itself, on the window `ids` (head to tail) at `offset`."""
        keys = [
            DINING.queue, DINING.queued, DINING.waiting, DINING.stats, DINING.arrivals,
            DINING.arrived,
        ]  # fmt: skip
        for job_id in ids:
            keys += [DINING.job(job_id), DINING.result(job_id)]
        args = [DINING.channel, offset, ARRIVAL_BUCKET_MS, *ids]
        connection = self.queue.connection
        return await connection.run_script(connection.scripts.expire_tail, keys, args)


def untraced(*job_ids: str) -> ExpireReport:
    """The report of a run that expired `job_ids` (tail first), none with a trace context."""
    return ExpireReport(expired=job_ids, traces=("",) * len(job_ids))


async def assert_expired(env: Env, job_ids: Sequence[str]) -> None:
    for job_id in job_ids:
        result = await env.queue.get_result(job_id, "dining")
        assert result is not None and result.status == QueueState.EXPIRED
        assert result.error == f"not started within its ttl of {TTL} s"
        assert TTL - 60 < await env.raw.ttl(DINING.result(job_id)) <= TTL
        assert await env.raw.hget(DINING.queued, job_id) is None


async def assert_untouched(env: Env, job_ids: Sequence[str]) -> None:
    for job_id in job_ids:
        assert await env.raw.hget(DINING.queued, job_id) is not None
        assert not await env.raw.exists(DINING.result(job_id))


async def arrival_counts(env: Env) -> dict[str, int]:
    counts = await env.raw.hgetall(DINING.arrived)
    assert sorted(counts) == sorted(await env.raw.zrange(DINING.arrivals, 0, -1))
    return {second: int(count) for second, count in counts.items()}


# -- expiry ------------------------------------------------------------------------------
async def test_due_ordered_jobs_at_the_tail_are_expired_up_to_the_first_not_due(
    env: Env,
) -> None:
    """`late` is due but waits head-ward of an ordered job not due: left for a later run
    (the documented bound: an ordered job is due no earlier than those ahead of it, within
    the bucket width, so a real enqueue writes no such order)."""
    seconds = {job_id: await env.plant(job_id, DUE) for job_id in ("a", "b")}
    await env.plant("wait", AHEAD)
    await env.plant("late", DUE)
    before = await arrival_counts(env)
    subscriber = env.queue.connection.subscriber_client()
    pubsub = subscriber.pubsub()
    try:
        await pubsub.subscribe(DINING.channel)
        assert (await pubsub.get_message(timeout=10))["type"] == "subscribe"

        assert sorted(await env.queue.cleanup("dining")) == ["a", "b"]
        published: list[str] = []
        while len(published) < 2:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=10)
            assert message is not None, f"published so far: {published}"
            data = message["data"]
            published.append(data.decode() if isinstance(data, bytes) else data)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await subscriber.aclose()
    assert sorted(published) == ["a", "b"]
    await assert_expired(env, ["a", "b"])
    await assert_untouched(env, ["wait", "late"])
    assert await env.counter("expired") == 2
    after = await arrival_counts(env)
    for second in set(seconds.values()):
        gone = list(seconds.values()).count(second)
        assert after.get(str(second), 0) == before[str(second)] - gone
    assert sum(after.values()) == 2
    assert await env.listed() == ["late", "wait"]  # the expired ones trimmed off the tail
    assert await env.queue.cleanup("dining") == []  # nothing twice
    assert await env.counter("expired") == 2


async def test_the_script_replies_what_it_expired_trimmed_and_where_it_stopped(env: Env) -> None:
    for job_id, deadline in (("a", DUE), ("b", DUE), ("wait", AHEAD)):
        await env.plant(job_id, deadline)
    await env.raw.lpush(DINING.queue, "gone")  # a stale entry head-ward: never reached
    assert await env.script(0, ["gone", "wait", "b", "a"]) == [["a", "b"], 2, 1, ["", ""]]
    assert await env.listed() == ["gone", "wait"]
    # Nothing left to stop at: the whole stale list goes.
    await env.raw.hdel(DINING.queued, "wait")
    assert await env.script(0, ["gone", "wait"]) == [[], 2, 0, []]
    assert not await env.raw.exists(DINING.queue)


async def test_kept_entries_are_passed_over_and_a_due_job_behind_them_expired(
    env: Env,
) -> None:
    """An unordered job not due (its bucket expires it), a job waiting with a job hash (in
    `waiting`, or its hash alone): kept, and the due ordered job behind them is expired all
    the same. Its entry stays (stale) until the kept ones leave the tail."""
    await env.plant("unordered", AHEAD, ordered=False)
    await env.plant_waiting("released")
    await env.plant_waiting("hash-only", in_waiting=False)
    await env.plant("due", DUE)
    await env.plant("wait", AHEAD)
    listed = ["wait", "due", "hash-only", "released", "unordered"]
    assert await env.listed() == listed

    assert await env.queue.cleanup("dining") == ["due"]
    await assert_expired(env, ["due"])
    await assert_untouched(env, ["unordered", "wait"])
    assert await env.raw.exists(DINING.job("released"), DINING.job("hash-only")) == 2
    assert await env.raw.zscore(DINING.waiting, "released") is not None
    assert await env.listed() == listed
    assert await env.counter("expired") == 1

    # Workers take the kept ones off the tail: the stale entry reaches it and is trimmed.
    for _ in range(3):
        await env.raw.rpop(DINING.queue)
    assert await env.queue.cleanup("dining") == []
    assert await env.listed() == ["wait"]
    assert await env.counter("expired") == 1


async def test_an_unordered_due_job_is_expired_too(env: Env) -> None:
    await env.plant("unordered", DUE, ordered=False)
    await env.plant("wait", AHEAD)
    assert await env.tail() == untraced("unordered")
    await assert_expired(env, ["unordered"])
    assert await env.listed() == ["wait"]


TRACED = '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}'
"""A trace context line as the enqueue packs it (the second line of the value)."""


async def test_each_expired_job_comes_back_with_its_trace_context(env: Env) -> None:
    """The worker logs each expiry under the trace its job was created in: the script
    replies each expired job's trace context line at its id's position, '' for none."""
    await env.plant("traced", DUE, trace=TRACED)
    await env.plant("plain", DUE)
    await env.plant("wait", AHEAD)
    reply = await env.script(0, ["wait", "plain", "traced"])
    assert reply == [["traced", "plain"], 2, 1, [TRACED, ""]]

    # The other way round, through the cleanup's report: the traces follow their ids.
    await env.plant("plain-2", DUE)
    await env.plant("traced-2", DUE, trace=TRACED)
    await env.raw.lrem(DINING.queue, 1, "wait")  # the new jobs are at the tail now
    await env.raw.lpush(DINING.queue, "wait")
    report = await Chores(env.queue.connection, "dining").expire_due()
    assert report == ExpireReport(expired=("plain-2", "traced-2"), traces=("", TRACED))
    await assert_expired(env, ["traced", "plain", "plain-2", "traced-2"])


async def test_stale_entries_are_trimmed_at_the_tail_only(env: Env) -> None:
    await env.raw.lpush(DINING.queue, "ended-1", "ended-2")
    await env.plant("kept", AHEAD, ordered=False)
    await env.raw.lpush(DINING.queue, "ended-3")
    await env.plant("wait", AHEAD)
    assert await env.tail() == ExpireReport()
    assert await env.listed() == ["wait", "ended-3", "kept"]
    await assert_untouched(env, ["kept", "wait"])


async def test_a_wake_marker_at_the_tail_is_kept_for_the_idle_worker(env: Env) -> None:
    """A high or low enqueue's wake marker has no record: it is no stale entry, or the
    walk would trim it before an idle worker's BLMOVE took it, and the high job would
    wait until something else woke a worker."""
    await env.raw.lpush(DINING.queue, WAKE_MARKER, "ended-1")
    assert await env.tail() == ExpireReport()
    assert await env.listed() == ["ended-1", WAKE_MARKER]


async def test_a_value_that_does_not_parse_is_kept(env: Env) -> None:
    """The claim deals with it (a dead letter naming the problem); here it is passed over,
    so one poison value neither stalls the walk nor fails it after a write. A ttl SET EX
    refuses (0, a leading zero) is one."""
    now = await env.redis_ms()
    enqueued_at, expires_at = now - TTL * 1000, now + DUE
    headers = {
        "garbage": "not,a,header",
        "ttl-zero": f"{enqueued_at},{expires_at},0,3,n,o",
        "ttl-leading-zero": f"{enqueued_at},{expires_at},0{TTL},3,n,o",
        "seven-fields": f"{enqueued_at},{expires_at},{TTL},3,n,o,o",
        "other-mark": f"{enqueued_at},{expires_at},{TTL},3,n,x",
    }
    for job_id, header in headers.items():
        await env.plant(job_id, DUE, header=header)
    await env.raw.hset(DINING.queued, "one-line", f"{enqueued_at},{expires_at},{TTL},3,n,o")
    await env.raw.lpush(DINING.queue, "one-line")
    await env.plant("due", DUE)
    await env.plant("wait", AHEAD)

    assert await env.queue.cleanup("dining") == ["due"]
    await assert_untouched(env, [*headers, "one-line"])
    # `due` stays listed (stale): the kept values are tail-ward of it.
    assert await env.listed() == ["wait", "due", "one-line", *reversed(headers)]
    assert await env.counter("expired") == 1


async def test_an_empty_list_is_a_no_op(env: Env) -> None:
    before = await env.snapshot()
    assert await env.tail() == ExpireReport()
    assert await env.script(0, []) == [[], 0, 0, []]
    assert changed_keys(before, await env.snapshot()) == set()


async def test_a_window_taken_from_meanwhile_is_moved_and_nothing_is_written(
    env: Env,
) -> None:
    for job_id in ("a", "b", "c"):
        await env.plant(job_id, DUE)
    before = await env.snapshot()
    assert await env.script(0, ["b", "a", "gone"]) == ["moved"]
    assert await env.script(1, ["b", "a"]) == ["moved"]  # the window at offset 1 is c, b
    assert changed_keys(before, await env.snapshot()) == set()

    # A worker takes the tail between the run's read and its script: the run ends there.
    connection = env.queue.connection

    async def read_then_take(commands: Sequence[Sequence[Any]]) -> list[Any]:
        replies = await connection.execute_many(commands)
        await env.raw.rpop(DINING.queue)
        return replies

    report = await expire_in_order(
        connection.run_script, read_then_take, connection.refusal,
        connection.scripts.expire_tail, DINING,
    )  # fmt: skip
    assert report == ExpireReport()
    assert await env.listed() == ["c", "b"]
    await assert_untouched(env, ["a", "b", "c"])
    assert await env.counter("expired") == 0


async def five_entries(env: Env) -> None:
    """Tail to head: e1 due, kept (unordered, not due), e2 due, e3 due, wait."""
    await env.plant("e1", DUE)
    await env.plant("kept", AHEAD, ordered=False)
    await env.plant("e2", DUE)
    await env.plant("e3", DUE)
    await env.plant("wait", AHEAD)


async def test_windows_past_a_kept_entry_walk_on_at_an_offset(env: Env) -> None:
    """Window 1 (offset 0): e1 expired and trimmed, kept stays; window 2 (offset 1): e2
    and e3 expired, not trimmed (a kept entry is tail-ward of them); window 3 (offset 3,
    one entry: a short window): the walk stops at `wait`."""
    await five_entries(env)
    report = await env.tail(window=2)
    assert report == untraced("e1", "e2", "e3")
    await assert_expired(env, ["e1", "e2", "e3"])
    await assert_untouched(env, ["kept", "wait"])
    assert await env.listed() == ["wait", "e3", "e2", "kept"]


@pytest.mark.parametrize(
    ("limit", "expired"),
    [(1, ("e1",)), (2, ("e1",)), (3, ("e1", "e2")), (4, ("e1", "e2", "e3"))],
)
async def test_a_run_looks_at_limit_entries_at_most(
    env: Env, limit: int, expired: tuple[str, ...]
) -> None:
    await five_entries(env)
    assert await env.tail(window=2, limit=limit) == untraced(*expired)
    assert await env.counter("expired") == len(expired)
    await assert_untouched(env, sorted({"e1", "e2", "e3"} - set(expired)))
    # The rest is the next run's.
    rest = tuple(job_id for job_id in ("e1", "e2", "e3") if job_id not in expired)
    assert await env.tail(window=2) == untraced(*rest)


async def test_a_reused_id_listed_twice_is_expired_once(env: Env) -> None:
    """The old entry of `x` (its first job ended; its result gone, the id was enqueued
    again) is at the tail: the new job, due, is expired there, once, and its own entry
    head-ward is stale and trimmed with it."""
    await env.raw.lpush(DINING.queue, "x")
    await env.plant("a", DUE)
    await env.plant("x", DUE)
    assert sum((await arrival_counts(env)).values()) == 2  # the new x counted once
    assert await env.listed() == ["x", "a", "x"]

    assert await env.tail() == untraced("x", "a")
    await assert_expired(env, ["x", "a"])
    assert await env.counter("expired") == 2
    assert await arrival_counts(env) == {}
    assert not await env.raw.exists(DINING.queue, DINING.queued)


async def test_a_reused_id_not_yet_due_stops_the_walk_at_its_old_entry(env: Env) -> None:
    """The old entry cannot be told from the new one: it stands for the new job, ordered
    and not due, so the walk stops there (a worker taking it claims the new job)."""
    await env.raw.lpush(DINING.queue, "x")
    await env.plant("a", DUE)
    await env.plant("x", AHEAD)
    assert await env.script(0, ["x", "a", "x"]) == [[], 0, 1, []]
    assert await env.listed() == ["x", "a", "x"]
    await assert_untouched(env, ["a", "x"])


# -- faults ------------------------------------------------------------------------------
WRONG_TYPES: dict[str, tuple[str, ...]] = {
    "string": ("SET", "KEY", "not what the queue wrote"),
    "list": ("RPUSH", "KEY", "a"),
    "set": ("SADD", "KEY", "a"),
    "zset": ("ZADD", "KEY", "0", "a"),
    "hash": ("HSET", "KEY", "a", "1"),
    "stream": ("XADD", "KEY", "*", "a", "1"),
}
# Every shared key the tail walk reads or writes, and the type it must hold.
KEY_TYPES = {
    "queue": "list",
    "queued": "hash",
    "waiting": "zset",
    "stats": "hash",
    "arrivals": "zset",
    "arrived": "hash",
}
FAULTS = [
    (role, kind) for role, right in KEY_TYPES.items() for kind in WRONG_TYPES if kind != right
]


async def due_jobs(env: Env) -> dict[str, int]:
    """Two due ordered jobs at the tail, a stale entry between them, and one not due:
    the arrival second of each."""
    seconds = {"a": await env.plant("a", DUE)}
    await env.raw.lpush(DINING.queue, "ended")
    seconds["b"] = await env.plant("b", DUE)
    seconds["wait"] = await env.plant("wait", AHEAD)
    return seconds


async def plant_fault(client: RedisClient, key: str, kind: str) -> None:
    await client.delete(key)
    await client.execute_command(*(key if arg == "KEY" else arg for arg in WRONG_TYPES[kind]))


async def refused(env: Env, run: Callable[[], Any], key: str, problem: str) -> None:
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState) as info:
        await run()
    assert (info.value.key, info.value.problem) == (key, problem)
    assert changed_keys(before, await env.snapshot()) == set()


@pytest.mark.parametrize(("role", "kind"), FAULTS, ids=[f"{r}={k}" for r, k in FAULTS])
async def test_a_key_of_another_type_is_named_and_nothing_is_written(
    env: Env, role: str, kind: str
) -> None:
    await due_jobs(env)
    ids = await env.listed()
    key: str = getattr(DINING, role)
    await plant_fault(env.raw, key, kind)
    problem = f"holds a {kind}, where the queue keeps a {KEY_TYPES[role]}"
    # A queue list of another type is found by the run's own read (WRONGTYPE), the
    # script's check is reached only by a call with a window.
    await refused(env, env.tail, key, problem)
    await refused(env, lambda: env.script(0, ids), key, problem)


NOT_INTEGERS = ["many", "1.5", "1e3", " 7", "9223372036854775807", "007", "-0"]
"""Stored counts HINCRBY refuses: the last two read as integers, but Redis's own integer
text has no leading zero and no "-0"."""


@pytest.mark.parametrize("value", NOT_INTEGERS)
async def test_a_malformed_expired_counter_is_named_and_nothing_is_written(
    env: Env, value: str
) -> None:
    await due_jobs(env)
    await env.raw.hset(DINING.stats, "expired", value)
    await refused(env, env.tail, DINING.stats, f"field expired is not an integer: '{value}'")


@pytest.mark.parametrize("value", NOT_INTEGERS)
async def test_a_malformed_arrival_count_is_named_and_nothing_is_written(
    env: Env, value: str
) -> None:
    seconds = await due_jobs(env)
    second = seconds["b"]
    await env.raw.hset(DINING.arrived, str(second), value)
    await refused(env, env.tail, DINING.arrived, f"field {second} is not an integer: '{value}'")


async def test_after_a_refusal_the_run_expires_every_due_job(env: Env) -> None:
    await due_jobs(env)
    await env.raw.hset(DINING.stats, "expired", "007")
    with pytest.raises(CorruptQueueState):
        await env.tail()
    await env.raw.hset(DINING.stats, "expired", "7")
    assert await env.tail() == untraced("a", "b")
    assert await env.counter("expired") == 9
    assert await env.listed() == ["wait"]
    await assert_untouched(env, ["wait"])


async def test_a_result_key_of_any_type_is_replaced_by_the_expired_result(
    env: Env,
) -> None:
    await due_jobs(env)
    for kind, job_id in zip(("list", "hash"), ("a", "b"), strict=True):
        await plant_fault(env.raw, DINING.result(job_id), kind)
    assert await env.tail() == untraced("a", "b")
    await assert_expired(env, ["a", "b"])


async def test_the_events_of_a_watcher_arrive(env: Env) -> None:
    """The completion API sees the expiry (its result stored before its event)."""
    await env.plant("a", DUE)
    events = env.queue.completions(watch=[("dining", "a")])
    try:
        assert await env.tail() == untraced("a")
        completion = await asyncio.wait_for(anext(events), 10)
    finally:
        await events.aclose()
    assert completion.job_id == "a"
    assert completion.result is not None and completion.result.status == QueueState.EXPIRED
