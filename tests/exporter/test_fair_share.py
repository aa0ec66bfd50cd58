"""Fair share's metrics against a real redis-server holding the fair state the real
enqueue writes (tests/support/fair_share_data.py): the keys waiting (HLEN of the ring's
since hash), how long each has gone without a start (the since hash, all of it or a
sample), the backlogs of the largest keys with --fair-key-top, and what a scrape does
with a key of the wrong type."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.metric_catalogue import (
    FAIR_READ_ALL_KEYS,
    FAIR_SAMPLE_KEYS,
    MAX_FAIR_KEY_TOP,
)
from platform_common.jobs.queue import JobQueue, QueueSettings
from platform_common.jobs_exporter.collector import ScrapeResult
from platform_common.jobs_exporter.fair_share import since_command
from platform_common.jobs_exporter.label_values import capped_label_value
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from platform_common.jobs_exporter.snapshot import TypeSnapshot
from platform_common.jobs_exporter.type_reads import type_commands
from tests.support.exporter_data import Samples, of, parse, seed_type
from tests.support.fair_share_data import enqueue_keyed, plant_waits, redis_now_ms
from tests.support.queue_handlers import make_job
from tests.support.sync_redis import sync_reply

KEYS = QueueKeys("dining")


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[JobQueue]:
    """A producer of `dining` whose limits share it fairly by tenant."""
    instance = await JobQueue.connect(QueueSettings.from_url(redis_url, pool_min=1))
    await instance.set_limits("dining", fair_by="tenant")
    try:
        yield instance
    finally:
        await instance.aclose()


@pytest.fixture
async def top_exporter(redis_url: str) -> AsyncIterator[Exporter]:
    """An exporter publishing the backlog of its 2 largest keys per type."""
    instance = Exporter(
        ExporterSettings.from_args(["--redis-url", redis_url, "--fair-key-top", "2"])
    )
    try:
        yield instance
    finally:
        await instance.aclose()


class Timed:
    """A scrape between two readings of Redis' clock: a key planted `wait_ms` before
    `planted_ms` has waited, at the exporter's TIME, between the two bounds."""

    def __init__(self, admin: redis.Redis, result: ScrapeResult, before_ms: int) -> None:
        self.result = result
        self.before_ms = before_ms
        self.after_ms = redis_now_ms(admin)

    def bounds(self, planted_ms: int, wait_ms: float) -> tuple[float, float]:
        return (
            (wait_ms + self.before_ms - planted_ms) / 1000,
            (wait_ms + self.after_ms - planted_ms) / 1000,
        )

    def dining(self) -> TypeSnapshot:
        assert self.result.snapshot is not None
        [dining] = self.result.snapshot.types
        return dining

    def samples(self, exporter: Exporter) -> Samples:
        return parse(exporter.render(self.result, None)[0].decode())


async def timed_scrape(admin: redis.Redis, exporter: Exporter) -> Timed:
    before = redis_now_ms(admin)
    return Timed(admin, await exporter.scrape(), before)


async def test_keys_waiting_and_the_oldest_and_median_wait_without_a_start(
    admin: redis.Redis, queue: JobQueue, exporter: Exporter
) -> None:
    await enqueue_keyed(queue, "dining", {"acme": 1, "globex": 2, "initech": 1, "hooli": 1})
    await queue.enqueue(make_job("dining", ttl_seconds=3600))  # no tenant: the shared turn
    # The enqueue put each key in the since hash as it joined the ring.
    assert set(sync_reply(admin.hgetall(KEYS.fair_since))) == {
        "acme", "globex", "initech", "hooli",
    }  # fmt: skip
    # hooli's time is past Redis' now (served after the exporter read TIME): no wait.
    waits = {"acme": 10_000, "globex": 20_000, "initech": 600_000, "hooli": -60_000}
    planted = plant_waits(admin, "dining", waits)
    timed = await timed_scrape(admin, exporter)
    fair = timed.dining().fair
    assert fair is not None
    assert (fair.keys_waiting, fair.sampled, fair.top_backlogs) == (4, False, ())
    low, high = timed.bounds(planted, 600_000)
    assert fair.oldest_wait_seconds is not None and low <= fair.oldest_wait_seconds <= high
    low, high = timed.bounds(planted, (10_000 + 20_000) / 2)  # of 0, 10, 20 and 600 s
    assert fair.median_wait_seconds is not None and low <= fair.median_wait_seconds <= high
    samples = timed.samples(exporter)
    assert of(samples, "queue_fair_keys_waiting", agent_type="dining") == 4
    assert of(samples, "queue_fair_key_oldest_wait_seconds", agent_type="dining") == (
        fair.oldest_wait_seconds
    )
    assert of(samples, "queue_fair_key_median_wait_seconds", agent_type="dining") == (
        fair.median_wait_seconds
    )
    assert not any(name == "queue_fair_key_backlog" for name, _ in samples)  # off by default
    assert of(samples, "queue_exporter_malformed_values_total") == 0


async def test_the_configured_fair_share_and_its_held_back_counter(
    admin: redis.Redis, queue: JobQueue, exporter: Exporter
) -> None:
    seed_type(admin, "dining", waiting=1, stats={"held_back_max_running_per_key": 9})
    readings = []
    for change in ({"fair_by": "none"}, {"fair_by": "tenant", "max_running_per_key": 2},
                   {"fair_by": "none", "max_running_per_key": None}):  # fmt: skip
        await queue.set_limits("dining", **change)
        samples = parse(exporter.render(await exporter.scrape(), None)[0].decode())
        readings.append((
            of(samples, "queue_max_running_per_key_limit", agent_type="dining"),
            [dict(labels) for name, labels in samples if name == "queue_fair_share_by"],
        ))  # fmt: skip
    assert readings == [
        (None, []),
        (2, [{"agent_type": "dining", "fair_by": "tenant"}]),
        (None, []),
    ]
    counter = of(samples, "jobs_held_back_by_max_running_per_key_total", agent_type="dining")
    assert counter == 9
    # No key waits: 0 keys, and no wait sample.
    assert of(samples, "queue_fair_keys_waiting", agent_type="dining") == 0
    assert of(samples, "queue_fair_key_oldest_wait_seconds", agent_type="dining") is None


async def test_top_keys_by_backlog_carry_a_capped_fair_key_label(
    admin: redis.Redis, queue: JobQueue, top_exporter: Exporter
) -> None:
    long_key = "t" * 199 + "9"  # 200 bytes: a key, past the label value cap
    await enqueue_keyed(queue, "dining", {"acme": 1, long_key: 5, "globex": 3})
    result = await top_exporter.scrape()
    samples = parse(top_exporter.render(result, None)[0].decode())
    backlogs = {dict(labels)["fair_key"]: value for (name, labels), value in samples.items()
                if name == "queue_fair_key_backlog"}  # fmt: skip
    assert backlogs == {capped_label_value(long_key): 5, "globex": 3}
    assert capped_label_value(long_key) != long_key


def test_all_keys_are_read_up_to_the_bound_then_a_sample() -> None:
    assert since_command(KEYS, FAIR_READ_ALL_KEYS) == ("HGETALL", KEYS.fair_since)
    assert since_command(KEYS, FAIR_READ_ALL_KEYS + 1) == (
        "HRANDFIELD", KEYS.fair_since, FAIR_SAMPLE_KEYS, "WITHVALUES",
    )  # fmt: skip


async def test_beyond_the_bound_a_sample_of_keys_is_read_and_every_key_counted(
    admin: redis.Redis, queue: JobQueue, redis_url: str
) -> None:
    tenants = [f"tenant-{i}" for i in range(FAIR_READ_ALL_KEYS + 1)]
    await enqueue_keyed(queue, "dining", dict.fromkeys(tenants, 1))
    planted = plant_waits(admin, "dining", dict.fromkeys(tenants, 30_000))
    settings = ExporterSettings.from_args(["--redis-url", redis_url, "--fair-key-top", "1"])
    exporter = Exporter(settings)
    try:
        admin.config_resetstat()
        timed = await timed_scrape(admin, exporter)
    finally:
        await exporter.aclose()
    fair = timed.dining().fair
    assert fair is not None and (fair.keys_waiting, fair.sampled) == (len(tenants), True)
    low, high = timed.bounds(planted, 30_000)
    assert fair.oldest_wait_seconds == fair.median_wait_seconds
    assert fair.oldest_wait_seconds is not None and low <= fair.oldest_wait_seconds <= high
    [(_, backlog)] = fair.top_backlogs
    assert backlog == 1
    stats = sync_reply(admin.info("commandstats"))
    # One sample of the since hash, no HGETALL of it (stats and worker_jobs only), and the
    # backlog of the sampled keys alone besides type_commands' four lists.
    assert stats["cmdstat_hrandfield"]["calls"] == 1
    assert stats["cmdstat_hgetall"]["calls"] == 2
    assert stats["cmdstat_llen"]["calls"] == 4 + FAIR_SAMPLE_KEYS


async def test_a_wrong_typed_since_hash_skips_the_type_as_any_wrong_typed_key(
    admin: redis.Redis, queue: JobQueue, exporter: Exporter
) -> None:
    await enqueue_keyed(queue, "dining", {"acme": 1})
    admin.delete(KEYS.fair_since)
    admin.set(KEYS.fair_since, "not a hash")
    result = await exporter.scrape()
    assert result.snapshot is not None
    assert (result.snapshot.types, result.snapshot.malformed) == ((), 1)


async def test_a_since_that_is_no_number_is_left_out_and_counted(
    admin: redis.Redis, queue: JobQueue, exporter: Exporter
) -> None:
    await enqueue_keyed(queue, "dining", {"acme": 1, "globex": 1})
    planted = plant_waits(admin, "dining", {"acme": 5_000})
    admin.hset(KEYS.fair_since, "globex", "soon")
    timed = await timed_scrape(admin, exporter)
    fair = timed.dining().fair
    assert fair is not None and fair.keys_waiting == 2  # counted by HLEN all the same
    low, high = timed.bounds(planted, 5_000)
    assert fair.oldest_wait_seconds == fair.median_wait_seconds  # acme's alone
    assert fair.oldest_wait_seconds is not None and low <= fair.oldest_wait_seconds <= high
    assert timed.result.snapshot is not None and timed.result.snapshot.malformed == 1


async def test_a_wrong_typed_key_list_loses_its_backlog_only(
    admin: redis.Redis, queue: JobQueue, top_exporter: Exporter
) -> None:
    await enqueue_keyed(queue, "dining", {"acme": 2, "globex": 3})
    admin.delete(KEYS.fair_list("globex"))
    admin.set(KEYS.fair_list("globex"), "not a list")
    result = await top_exporter.scrape()
    assert result.snapshot is not None and result.snapshot.malformed == 1
    [dining] = result.snapshot.types
    assert dining.fair is not None and dining.fair.keys_waiting == 2
    assert dining.fair.top_backlogs == (("acme", 2),)
    assert dining.fair.oldest_wait_seconds is not None


async def test_a_type_without_fair_share_costs_one_hlen(
    admin: redis.Redis, exporter: Exporter
) -> None:
    fair = (KEYS.fair_since, KEYS.fair_ring, KEYS.fair_list(""))
    fair_commands = [c for c in type_commands(KEYS) if any(str(a).startswith(fair) for a in c)]
    assert fair_commands == [("HLEN", KEYS.fair_since)]
    seed_type(admin, "dining", waiting=2)
    await exporter.scrape()  # the first scrape discovers the type
    admin.config_resetstat()
    result = await exporter.scrape()
    assert result.snapshot is not None and result.snapshot.round_trips == 1
    [dining] = result.snapshot.types
    assert (dining.fair_keys_waiting, dining.fair) == (0, None)
    stats = sync_reply(admin.info("commandstats"))
    assert "cmdstat_hrandfield" not in stats
    # HLEN of queued and of the since hash; HGETALL of stats and worker_jobs.
    assert (stats["cmdstat_hlen"]["calls"], stats["cmdstat_hgetall"]["calls"]) == (2, 2)


def test_the_top_keys_setting_is_bounded() -> None:
    assert ExporterSettings.from_args([]).fair_key_top == 0
    top = ExporterSettings.from_env({"EXPORTER_FAIR_KEY_TOP": str(MAX_FAIR_KEY_TOP)})
    assert top.fair_key_top == MAX_FAIR_KEY_TOP
    with pytest.raises(ConfigurationError, match="EXPORTER_FAIR_KEY_TOP"):
        ExporterSettings.from_env({"EXPORTER_FAIR_KEY_TOP": str(MAX_FAIR_KEY_TOP + 1)})
