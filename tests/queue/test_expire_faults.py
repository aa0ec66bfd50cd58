"""Fault injection for `queue_expire.lua`: each key the cleanup touches is planted with the
wrong type or a malformed value, the cleanup runs, and the outcome is either success
with a consistent state or the package's CorruptQueueState (naming the key) with the whole
keyspace unchanged (DUMP and absolute expiry of every key compared). Redis does not undo
a script that fails midway, so "unchanged" is the proof that every check ran first.
The queue list is the exception: the cleanup's last step (the tail walk,
lua/queue_expire_tail.lua) finds it of another type, after the steps before it have
done their own, each atomic, work.

The jobs expired here wait with a job hash (`waiting` and `expiry` entries: requeued,
released, or enqueued by the previous layout), the form queue_expire.lua reads; a job
still packed in `queued` is expired by its bucket (test_expire_queued.py).

A job whose own record does not parse is no fault of the cleanup: it is expired like any
other (its deadline is the expiry set's), the problem in its result, so one poison
record never stalls the cleanup of every other job.

Every case runs on a single node; on the cluster one case per key, the planted type
rotating (`cluster_sample`, tests/support/backends.py): what is planted is a key's
content, alike on either; the cluster adds one slot for the keys and its client's
errors, which one case per key proves.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
from redis.exceptions import ResponseError

from platform_common.jobs import CorruptQueueState
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue.expiry import (
    CORRUPT_RESULT_TTL_SECONDS,
    ExpireReport,
    expire_jobs,
)
from platform_common.jobs.redis.script import Script
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import Chores
from tests.support.keyspace import changed_keys
from tests.support.queue_env import QueueEnv
from tests.support.queue_handlers import make_job
from tests.support.stored_jobs import to_job_hash

pytestmark = [pytest.mark.cluster_sample(planted=("kind", "value")), pytest.mark.valkey]

DINING = QueueKeys("dining")


@dataclass
class Env(QueueEnv):
    due: list[str] = field(default_factory=list)
    """Two queued jobs past their TTL: what the cleanup would expire."""

    async def prepare(self) -> None:
        self.due = await self.queue.enqueue_many([make_job(ttl_seconds=600) for _ in range(2)])
        await self.queue.enqueue(make_job(ttl_seconds=600))  # not due: stays as it is
        await make_due(self.raw, self.due)

    async def expire(self, job_ids: list[str]) -> list[str]:
        """The script itself, given the ids (the cleanup reads them from the expiry set)."""
        connection = self.queue.connection
        report = await expire_jobs(
            connection.run_script, connection.scripts.expire, DINING, job_ids
        )
        return list(report.expired)


async def make_due(client: RedisClient, job_ids: list[str]) -> None:
    """Give each job (enqueued, so packed in `queued`) the form with a job hash that
    queue_expire.lua reads (tests/support/stored_jobs.py to_job_hash), its deadline past."""
    seconds, micros = await client.time()
    past = int(seconds) * 1000 + int(micros) // 1000 - 1000
    for job_id in job_ids:
        await to_job_hash(client, DINING, job_id)
        await client.hset(DINING.job(job_id), "expires_at", str(past))
        await client.zadd(DINING.expiry, {job_id: past})


# -- the faults --------------------------------------------------------------------------
# A command that makes a key of each type (KEY is replaced by the key).
WRONG_TYPES: dict[str, tuple[str, ...]] = {
    "string": ("SET", "KEY", "not what the queue wrote"),
    "list": ("RPUSH", "KEY", "a"),
    "set": ("SADD", "KEY", "a"),
    "zset": ("ZADD", "KEY", "0", "a"),
    "hash": ("HSET", "KEY", "a", "1"),
    "stream": ("XADD", "KEY", "*", "a", "1"),
}
# Every shared key the cleanup touches, and the type it must hold.
SHARED_KEYS = {
    DINING.expiry: "zset",
    DINING.delayed: "zset",
    DINING.processing: "list",
    DINING.leases: "zset",
    DINING.stats: "hash",
    DINING.waiting: "zset",
    DINING.cancels: "hash",
}
SHARED_FAULTS = [
    (key, kind) for key, right in SHARED_KEYS.items() for kind in WRONG_TYPES if kind != right
]


async def plant(client: RedisClient, key: str, kind: str) -> None:
    await client.delete(key)
    await client.execute_command(*(key if arg == "KEY" else arg for arg in WRONG_TYPES[kind]))


@pytest.mark.parametrize(("key", "kind"), SHARED_FAULTS, ids=[f"{k}={t}" for k, t in SHARED_FAULTS])
async def test_a_shared_key_of_another_type_is_named_and_nothing_is_written(
    env: Env, key: str, kind: str
) -> None:
    await plant(env.raw, key, kind)
    # The wording of every queue script's refusal (and of QueueConnection.refusal).
    named = (key, f"holds a {kind}, where the queue keeps a {SHARED_KEYS[key]}")
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState) as info:
        await env.queue.cleanup("dining")
    assert (info.value.key, info.value.problem) == named
    assert await env.snapshot() == before
    # The script's own check, past the cleanup's read of the expiry set.
    with pytest.raises(CorruptQueueState) as info:
        await env.expire(env.due)
    assert (info.value.key, info.value.problem) == named
    assert await env.snapshot() == before


@pytest.mark.parametrize(
    "value",
    ["many", "1.5", "1e3", "", " 7", "9223372036854775807", "1234567890123456789", "007", "-0"],
)
async def test_a_malformed_expired_counter_is_named_and_nothing_is_written(
    env: Env, value: str
) -> None:
    """19 digits and more are refused too: adding a batch could overflow HINCRBY. So are
    "007" and "-0": digits, but not Redis's own integer text, which HINCRBY refuses."""
    await env.raw.hset(DINING.stats, "expired", value)
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState) as info:
        await env.queue.cleanup("dining")
    assert info.value.key == DINING.stats
    assert info.value.problem == f"field expired is not an integer: '{value}'"
    assert await env.snapshot() == before


async def test_a_large_valid_expired_counter_is_added_to(env: Env) -> None:
    await env.raw.hset(DINING.stats, "expired", "999999999999999990")  # 18 digits
    assert sorted(await env.queue.cleanup("dining")) == sorted(env.due)
    assert await env.raw.hget(DINING.stats, "expired") == "999999999999999992"


def expiry_writes(env: Env) -> set[bytes]:
    """The keys expiring the due jobs writes (queue_expire.lua)."""
    expected = {DINING.expiry, DINING.waiting, DINING.stats}
    for job_id in env.due:
        expected |= {DINING.job(job_id), DINING.result(job_id)}
    return {key.encode() for key in expected}


async def assert_due_expired(env: Env) -> None:
    for job_id in env.due:
        result = await env.queue.get_result(job_id, "dining")
        assert result is not None and result.status == "expired"
    assert (await env.queue.stats("dining")).counters["expired"] == len(env.due)


@pytest.mark.parametrize("kind", ["list", "set", "zset", "hash", "stream"])
async def test_stale_queue_entries_are_trimmed_and_a_result_key_of_another_type_replaced(
    env: Env, kind: str
) -> None:
    """The cleanup's tail walk (lua/queue_expire_tail.lua) removes the entries at the
    queue list's tail that name no job; a result key of any type is overwritten by SET."""
    await plant(env.raw, DINING.queue, "list")  # one entry, "a": no job of that id
    await env.raw.rpush(DINING.queue, "b")
    await plant(env.raw, DINING.result(env.due[0]), kind)
    before = await env.snapshot()
    assert sorted(await env.queue.cleanup("dining")) == sorted(env.due)
    changed = changed_keys(before, await env.snapshot())
    assert changed == expiry_writes(env) | {DINING.queue.encode()}
    assert not await env.raw.exists(DINING.queue)
    await assert_due_expired(env)


@pytest.mark.parametrize("kind", ["string", "set", "zset", "hash", "stream"])
async def test_a_queue_list_of_another_type_is_named_after_the_due_jobs_are_expired(
    env: Env, kind: str
) -> None:
    """The tail walk's read of the queue list fails (WRONGTYPE): CorruptQueueState names
    it. The steps before it in the same cleanup, each atomic, have done their work: the
    due jobs with a job hash are expired, counted once."""
    await plant(env.raw, DINING.queue, kind)
    before = await env.snapshot()
    told: list[ExpireReport] = []
    with pytest.raises(CorruptQueueState) as info:
        await Chores(env.queue.connection, "dining").expire_due(on_expired=told.append)
    named = (DINING.queue, f"holds a {kind}, where the queue keeps a list")
    assert (info.value.key, info.value.problem) == named
    assert changed_keys(before, await env.snapshot()) == expiry_writes(env)
    await assert_due_expired(env)
    # What the first step expired was told before the tail walk raised: a worker logs a
    # line for each of those jobs all the same.
    assert [sorted(report.expired) for report in told] == [sorted(env.due)]


TRACED = '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}'
"""A job hash's trace_context field, as an enqueue inside a trace wrote it."""


async def test_each_expired_job_comes_back_with_its_trace_context(env: Env) -> None:
    """The worker logs each expiry under the trace its job was created in: the script
    replies each expired job's trace_context at its id's position, '' for none."""
    plain, traced = env.due
    await env.raw.hset(DINING.job(traced), "trace_context", TRACED)
    connection = env.queue.connection
    report = await expire_jobs(
        connection.run_script, connection.scripts.expire, DINING, [plain, traced]
    )
    assert report == ExpireReport(expired=(plain, traced), traces=("", TRACED))


async def test_the_script_refuses_a_bad_fallback_ttl_before_writing(env: Env) -> None:
    """A constant of expiry.py, not stored state: a bug, refused as Redis refuses one."""
    before = await env.snapshot()
    keys = [DINING.expiry, DINING.delayed, DINING.processing, DINING.leases, DINING.stats]
    keys += [DINING.waiting, DINING.job(env.due[0]), DINING.result(env.due[0])]
    for fallback in ("0", "1e9", "x", "315360001"):
        call = [DINING.channel, fallback, env.due[0]]
        with pytest.raises(ResponseError) as info:
            await env.queue.connection.run_script(Script.named("queue_expire"), keys, call)
        assert str(info.value) == (
            f"fallback ttl must be an integer from 1 to 315360000, got '{fallback}'; "
            "nothing was changed"
        )
    assert await env.snapshot() == before


# -- a poison record: expired all the same, the problem in its result -----------------------
# field -> value planted (None: removed), and what the result's error then says.
EXPIRES_AT, TTL, STATE = "stored field expires_at", "stored field ttl", "stored state"
POISON: dict[str, tuple[dict[str, str | None], str]] = {
    "expires_at garbage": ({"expires_at": "soon"}, EXPIRES_AT),
    "expires_at in exponent notation": ({"expires_at": "9.2233720386508995e+21"}, EXPIRES_AT),
    "expires_at missing": ({"expires_at": None}, EXPIRES_AT),
    "ttl garbage": ({"ttl": "a minute"}, TTL),
    "ttl zero": ({"ttl": "0"}, TTL),
    "ttl negative": ({"ttl": "-5"}, TTL),
    "ttl past the maximum": ({"ttl": "9223372036854775807"}, TTL),
    "ttl missing": ({"ttl": None}, TTL),
    "state of a newer version": ({"state": "paused"}, STATE),
}


async def test_a_poison_record_is_expired_with_its_problem_and_the_others_with_it(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    poison_jobs = [make_job(ttl_seconds=600) for _ in POISON]
    await env.queue.enqueue_many(poison_jobs)
    poisoned = {job["job_id"]: fault for job, fault in zip(poison_jobs, POISON, strict=True)}
    await make_due(env.raw, list(poisoned))
    for job_id, fault in poisoned.items():
        for name, value in POISON[fault][0].items():
            if value is None:
                await env.raw.hdel(DINING.job(job_id), name)
            else:
                await env.raw.hset(DINING.job(job_id), name, value)
    caplog.set_level(logging.WARNING, "platform_common.jobs.queue.expiry")

    expired = await env.queue.cleanup("dining")
    assert sorted(expired) == sorted([*env.due, *poisoned])
    assert await env.queue.cleanup("dining") == []  # nothing left behind to retry
    for job_id, fault in poisoned.items():
        result = await env.queue.get_result(job_id, "dining")
        assert result is not None and result.status == "expired", fault
        assert POISON[fault][1] in (result.error or ""), (fault, result.error)
        assert not await env.raw.exists(DINING.job(job_id))
        ttl = await env.raw.ttl(DINING.result(job_id))
        kept = CORRUPT_RESULT_TTL_SECONDS if POISON[fault][1] == TTL else 600
        assert kept - 60 < ttl <= kept, fault
    warned = {getattr(r, "job_id", None) for r in caplog.records}
    assert warned >= set(poisoned)
    stats = await env.queue.stats("dining")
    assert stats.counters["expired"] == len(expired)
    assert stats.queued == 1  # the one job not due
    assert stats.counters["enqueued"] == stats.counters["expired"] + 1


@pytest.mark.parametrize("kind", ["string", "list", "set", "zset", "stream"])
async def test_a_job_key_of_another_type_is_expired_and_does_not_stop_the_others(
    env: Env, kind: str
) -> None:
    await plant(env.raw, DINING.job(env.due[0]), kind)
    assert sorted(await env.queue.cleanup("dining")) == sorted(env.due)
    result = await env.queue.get_result(env.due[0], "dining")
    assert result is not None and result.status == "expired"
    assert "stored job is not a hash" in (result.error or "")
    assert not await env.raw.exists(DINING.job(env.due[0]))
    assert await env.queue.cleanup("dining") == []


async def test_a_finished_record_left_in_the_expiry_set_is_only_taken_out(env: Env) -> None:
    """Its outcome stands: no second result, event or count."""
    job_id = env.due[0]
    await env.raw.hset(DINING.job(job_id), mapping={"state": "succeeded", "ttl": "x"})
    await env.raw.set(DINING.result(job_id), '{"status":"succeeded","result":1,"error":null}')
    assert await env.queue.cleanup("dining") == [env.due[1]]
    result = await env.queue.get_result(job_id, "dining")
    assert result is not None and (result.status, result.result) == ("succeeded", 1)
    assert await env.raw.zscore(DINING.expiry, job_id) is None
    assert (await env.queue.stats("dining")).counters["expired"] == 1


async def test_an_id_given_twice_is_expired_once(env: Env) -> None:
    assert await env.expire([env.due[0], env.due[0]]) == [env.due[0]]
    assert (await env.queue.stats("dining")).counters["expired"] == 1
