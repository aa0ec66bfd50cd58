"""Fault injection for `queue_kept_prune.lua` (retention of the dead-letter and failed
lists, Chores.prune_kept): each key the pruning touches is planted with the wrong
type or an unexpected value, the pruning runs, and the outcome is either success with a
consistent state or the package's CorruptQueueState naming the key with the whole
keyspace unchanged (DUMP and absolute expiry of every key compared). Redis does not undo
a script that fails midway, so "unchanged" is the proof that every check ran first.

A job key of another type is no fault of the list: its entry is pruned like any other
once beyond the cap (the list stays bounded), and the key, no record the queue wrote, is
left as it is. The only field read is the record's state, which decides whether the
record goes with its entry.

Every case runs on a single node; on the cluster one case per key role, the planted type
or value rotating (`cluster_sample`, tests/support/backends.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from redis.exceptions import ResponseError

from platform_common.jobs import CorruptQueueState
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.status import AttemptOutcome
from platform_common.jobs.worker.retention import PruneReport, Retention
from tests.support.keyspace import changed_keys
from tests.support.queue_env import QueueEnv
from tests.support.queue_handlers import make_job

DINING = QueueKeys("dining")
TOKEN = "token-1"
CAP = 2
pytestmark = [
    pytest.mark.cluster_sample(planted=("kind", "fields")),
    pytest.mark.queue(dead_letter_max=CAP),
    pytest.mark.valkey,
]
LISTS = {"dead": DINING.dead, "failed": DINING.failed}
# How a job ends up on each list: dead-lettered at once, or failed for good.
ENDINGS = {"dead": ("corrupt", AttemptOutcome.DEAD), "failed": ("fatal", AttemptOutcome.FAILED)}
OTHER = {"dead": "failed", "failed": "dead"}


@dataclass
class Env(QueueEnv):
    async def kept(self, role: str, count: int) -> list[str]:
        """`count` jobs ended onto the `role` list, oldest first."""
        mode, outcome = ENDINGS[role]
        job_ids = []
        for _ in range(count):
            job_id = await self.queue.enqueue(make_job())
            assert await self.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
            _, claims = await self.leases.claim("worker-1", [(job_id, TOKEN)])
            assert [claim.job_id for claim in claims] == [job_id]
            assert await self.leases.fail(job_id, TOKEN, "boom", mode=mode) == outcome
            job_ids.append(job_id)
        assert await self.raw.lrange(LISTS[role], 0, -1) == job_ids[::-1]
        return job_ids

    async def script(self, list_key: str, job_ids: list[str], cap: object = CAP) -> object:
        """The script itself (prune_kept reads the ids from the list first)."""
        connection = self.queue.connection
        keys = [list_key]
        for job_id in job_ids:
            keys += [DINING.job(job_id), DINING.result(job_id)]
        return await connection.run_script(connection.scripts.kept_prune, keys, [cap, *job_ids])


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


async def plant(client: RedisClient, key: str, kind: str) -> None:
    await client.delete(key)
    await client.execute_command(*(key if arg == "KEY" else arg for arg in WRONG_TYPES[kind]))


def cases(native: str | None, *roles: str) -> list[object]:
    """pytest params (role, kind): every type but `native` at each role."""
    return [
        pytest.param(role, kind, id=f"{role}-{kind}")
        for role in roles
        for kind in sorted(WRONG_TYPES)
        if kind != native
    ]


# -- the lists: refused, nothing written, the other list pruned all the same ---------------
@pytest.mark.parametrize(("role", "kind"), cases("list", "dead", "failed"))
async def test_a_list_of_another_type_is_refused_and_nothing_is_written(
    env: Env, role: str, kind: str
) -> None:
    await env.kept(OTHER[role], CAP)  # at the cap: nothing of it to prune
    await plant(env.raw, LISTS[role], kind)
    named = (LISTS[role], f"holds a {kind}, where the queue keeps a list")
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState) as info:
        await env.chores.prune_kept()
    assert (info.value.key, info.value.problem) == named
    assert changed_keys(before, await env.snapshot()) == set()
    # The script's own check (the list could change type after prune_kept read it).
    with pytest.raises(CorruptQueueState) as info:
        await env.script(LISTS[role], ["some-job"])
    assert (info.value.key, info.value.problem) == named
    assert changed_keys(before, await env.snapshot()) == set()


@pytest.mark.parametrize(("role", "kind"), cases("list", "dead", "failed"))
async def test_one_corrupt_list_does_not_stop_the_pruning_of_the_other(
    env: Env, role: str, kind: str
) -> None:
    oldest, *kept = await env.kept(OTHER[role], CAP + 1)
    await plant(env.raw, LISTS[role], kind)
    before = await env.snapshot()
    with pytest.raises(CorruptQueueState) as info:
        await env.chores.prune_kept()
    assert info.value.key == LISTS[role]
    pruned = {LISTS[OTHER[role]], DINING.job(oldest), DINING.result(oldest)}
    assert changed_keys(before, await env.snapshot()) == {key.encode() for key in pruned}
    assert await env.raw.lrange(LISTS[OTHER[role]], 0, -1) == kept[::-1]
    assert not await env.raw.exists(DINING.job(oldest), DINING.result(oldest))


@pytest.mark.parametrize("cap", ["0", "-1", "1.5", "1e3", "two", ""])
async def test_the_script_refuses_a_bad_cap_before_writing(env: Env, cap: str) -> None:
    """The cap is a setting (dead_letter_max, bounded at startup), not stored state: a bad
    one is a bug, refused as Redis refuses one."""
    job_ids = await env.kept("dead", CAP + 1)
    before = await env.snapshot()
    with pytest.raises(ResponseError) as info:
        await env.script(DINING.dead, job_ids, cap)
    assert str(info.value) == f"the cap must be an integer >= 1, got {cap}; nothing was changed"
    assert changed_keys(before, await env.snapshot()) == set()


# -- a job key of another type: pruned beyond the cap, the key left as it is --------------
@pytest.mark.parametrize(("role", "kind"), cases("hash", "dead", "failed"))
async def test_an_entry_whose_job_key_holds_another_type_is_pruned_beyond_the_cap(
    env: Env, role: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    oldest, *kept = await env.kept(role, CAP + 1)
    await plant(env.raw, DINING.job(oldest), kind)
    caplog.set_level(logging.WARNING, "platform_common.jobs.worker.retention")
    before = await env.snapshot()
    assert await env.chores.prune_kept() == PruneReport(beyond_cap=1, expired=0)
    # Only the entry: the foreign key, and the result (it has its retention TTL), stay.
    assert changed_keys(before, await env.snapshot()) == {LISTS[role].encode()}
    assert await env.raw.lrange(LISTS[role], 0, -1) == kept[::-1]
    warned = [record for record in caplog.records if getattr(record, "job_id", None) == oldest]
    assert len(warned) == 1 and DINING.job(oldest) in warned[0].getMessage()
    assert await env.chores.prune_kept() == PruneReport()  # at the cap now: nothing to do


@pytest.mark.parametrize(("role", "kind"), cases("hash", "dead", "failed"))
async def test_an_entry_whose_job_key_holds_another_type_is_kept_within_the_cap(
    env: Env, role: str, kind: str
) -> None:
    """Its key exists: the entry is no expired one, so within the cap it stays."""
    oldest, _ = await env.kept(role, CAP)
    await plant(env.raw, DINING.job(oldest), kind)
    before = await env.snapshot()
    assert await env.chores.prune_kept() == PruneReport()
    assert changed_keys(before, await env.snapshot()) == set()


@pytest.mark.parametrize(("role", "kind"), cases(None, "dead", "failed"))
async def test_a_result_key_of_any_type_goes_with_its_entry(env: Env, role: str, kind: str) -> None:
    oldest, *kept = await env.kept(role, CAP + 1)
    await plant(env.raw, DINING.result(oldest), kind)
    before = await env.snapshot()
    assert await env.chores.prune_kept() == PruneReport(beyond_cap=1, expired=0)
    pruned = {LISTS[role], DINING.job(oldest), DINING.result(oldest)}
    assert changed_keys(before, await env.snapshot()) == {key.encode() for key in pruned}
    assert await env.raw.lrange(LISTS[role], 0, -1) == kept[::-1]


# -- the record's fields: only its state is read -------------------------------------------
# Fields planted on the oldest record (None: removed), and whether the record and result
# go with its entry: only a record that ended as this list's jobs do.
RECORDS: dict[str, tuple[dict[str, str | None], bool]] = {
    "state missing (a new job reusing the id)": ({"state": None}, False),
    "state queued": ({"state": "queued"}, False),
    "state running": ({"state": "running"}, False),
    "state of a newer version": ({"state": "paused"}, False),
    "state empty": ({"state": ""}, False),
    "state unprintable": ({"state": "\x00\xff"}, False),
    "numeric fields that do not parse": (
        {"finished_at": "soon", "ttl": "1e3", "attempts": "many", "expires_at": None},
        True,
    ),
}


@pytest.mark.parametrize("role", ["dead", "failed"])
@pytest.mark.parametrize("fields", list(RECORDS))
async def test_a_record_goes_with_its_entry_only_if_it_ended_on_the_list(
    env: Env, role: str, fields: str
) -> None:
    oldest, *kept = await env.kept(role, CAP + 1)
    planted, deleted = RECORDS[fields]
    for name, value in planted.items():
        if value is None:
            await env.raw.hdel(DINING.job(oldest), name)
        else:
            await env.raw.hset(DINING.job(oldest), name, value)
    before = await env.snapshot()
    assert await env.chores.prune_kept() == PruneReport(beyond_cap=1, expired=0)
    changed = {LISTS[role]}
    if deleted:
        changed |= {DINING.job(oldest), DINING.result(oldest)}
    assert changed_keys(before, await env.snapshot()) == {key.encode() for key in changed}
    assert await env.raw.lrange(LISTS[role], 0, -1) == kept[::-1]


# -- consistency after pruning ------------------------------------------------------------
async def test_an_entry_whose_record_this_call_deleted_does_not_outlive_it(
    env: Env,
) -> None:
    """An id listed twice: its oldest entry is pruned beyond the cap with the record,
    and its other entry, now within the cap, goes as expired in the same call (the
    records are read before the first write, yet no entry outlives its record)."""
    oldest, newer = await env.kept("dead", CAP)
    await env.raw.lpush(DINING.dead, oldest)  # listed again, as the newest
    report = await Retention(env.queue.connection, "dining").prune()
    assert report == PruneReport(beyond_cap=1, expired=1)
    assert await env.raw.lrange(DINING.dead, 0, -1) == [newer]
    assert not await env.raw.exists(DINING.job(oldest), DINING.result(oldest))
    assert await env.raw.exists(DINING.job(newer), DINING.result(newer)) == 2
    counters = (await env.queue.stats("dining")).counters
    assert (counters["failed"], counters["dead_lettered"]) == (CAP, CAP)
