"""Fair share's metrics against a real redis-server holding the fair state as the enqueue
writes it (tests/support/fair_share_data.py): the scan's reply (lua/queue_fair_scan.lua),
and what a scrape makes of it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.metric_catalogue import FAIR_SCAN_KEYS, MAX_FAIR_KEY_TOP
from platform_common.jobs.queue import JobQueue, QueueSettings
from platform_common.jobs.redis.script import run_command
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs_exporter.app import create_app
from platform_common.jobs_exporter.fair_share import fair_scan_call
from platform_common.jobs_exporter.label_values import capped_label_value
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from platform_common.jobs_exporter.type_reads import type_commands
from tests.support.exporter_data import Samples, of, parse, seed_type
from tests.support.fair_share_data import Waiting, seed_fair
from tests.support.sync_redis import sync_reply

KEYS = QueueKeys("dining")


async def metrics(http: httpx.AsyncClient) -> Samples:
    return parse((await http.get("/metrics", headers={"Accept": "text/plain"})).text)


@pytest.fixture
async def top_http(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The exporter's app publishing the backlog of its 2 largest keys per type."""
    app = create_app(ExporterSettings.from_args(["--redis-url", redis_url, "--fair-key-top", "2"]))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as client:
        yield client
    await app.state.exporter.aclose()


async def test_the_scan_reads_each_key_backlog_and_oldest_waiting_job(
    admin: redis.Redis, redis_client: RedisClient
) -> None:
    seed_fair(admin, "dining", {
        "acme": [Waiting("a1", 60_000), Waiting("a2", 1_000)],
        # A stray at the tail (its job expired): the next id is the oldest waiting job.
        "globex": [Waiting("g0", 900_000, "stray"), Waiting("g1", 30_000, "hash")],
        "initech": [Waiting("i0", 5_000, "stray")],  # nothing waits: its age is unknown
    })  # fmt: skip
    reply = await run_command(redis_client, fair_scan_call(KEYS))
    length, now_ms, shared, skipped, *rest = reply
    assert (length, shared, skipped) == (4, 1, 0)
    triples = {rest[i]: (rest[i + 1], rest[i + 2]) for i in range(0, len(rest), 3)}
    assert set(triples) == {"acme", "globex", "initech"}
    packed = sync_reply(admin.hget(KEYS.queued, "a1"))
    assert packed is not None
    assert triples["acme"] == (2, packed.split(",")[0])
    assert triples["globex"] == (2, sync_reply(admin.hget(KEYS.job("g1"), "enqueued_at")))
    assert triples["initech"] == (1, None)
    assert now_ms - int(triples["acme"][1]) >= 60_000


async def test_a_scrape_publishes_keys_waiting_and_the_oldest_and_median_key_wait(
    admin: redis.Redis, http: httpx.AsyncClient
) -> None:
    seed_fair(admin, "dining", {
        "acme": [Waiting("a1", 10_000)],
        "globex": [Waiting("g1", 20_000, "hash"), Waiting("g2")],
        "initech": [Waiting("i1", 600_000)],
    })  # fmt: skip
    samples = await metrics(http)
    assert of(samples, "queue_fair_keys_waiting", agent_type="dining") == 3
    oldest = of(samples, "queue_fair_key_oldest_wait_seconds", agent_type="dining")
    median = of(samples, "queue_fair_key_median_wait_seconds", agent_type="dining")
    # Waits by Redis TIME, read after the seeding: never below the age seeded.
    assert oldest is not None and 600 <= oldest < 660
    assert median is not None and 20 <= median < 80
    assert not any(name == "queue_fair_key_backlog" for name, _ in samples)  # off by default
    assert of(samples, "queue_exporter_malformed_values_total") == 0


async def test_the_configured_fair_share_and_its_held_back_counter(
    admin: redis.Redis, redis_url: str, http: httpx.AsyncClient
) -> None:
    seed_type(admin, "dining", waiting=1, stats={"held_back_max_running_per_key": 9})
    queue = await JobQueue.connect(QueueSettings.from_url(redis_url, pool_min=1))
    readings = []
    try:
        for change in ({}, {"fair_by": "tenant", "max_running_per_key": 2},
                       {"fair_by": "none", "max_running_per_key": None}):  # fmt: skip
            if change:
                await queue.set_limits("dining", **change)
            samples = await metrics(http)
            readings.append((
                of(samples, "queue_max_running_per_key_limit", agent_type="dining"),
                [dict(labels) for name, labels in samples if name == "queue_fair_share_by"],
            ))  # fmt: skip
    finally:
        await queue.aclose()
    assert readings == [
        (None, []),
        (2, [{"agent_type": "dining", "fair_by": "tenant"}]),
        (None, []),
    ]
    counter = of(samples, "jobs_held_back_by_max_running_per_key_total", agent_type="dining")
    assert counter == 9


async def test_top_keys_by_backlog_carry_a_capped_fair_key_label(
    admin: redis.Redis, top_http: httpx.AsyncClient
) -> None:
    long_key = "ü" * 200  # 400 bytes of UTF-8: past the label value cap
    seed_fair(admin, "dining", {
        "acme": [Waiting("a1")],
        long_key: [Waiting(f"l{i}") for i in range(5)],
        "globex": [Waiting(f"g{i}") for i in range(3)],
    })  # fmt: skip
    samples = await metrics(top_http)
    backlogs = {dict(labels)["fair_key"]: value for (name, labels), value in samples.items()
                if name == "queue_fair_key_backlog"}  # fmt: skip
    assert backlogs == {capped_label_value(long_key): 5, "globex": 3}
    assert capped_label_value(long_key) != long_key


async def test_the_scan_reads_a_bounded_number_of_keys_and_counts_them_all(
    admin: redis.Redis, redis_client: RedisClient, http: httpx.AsyncClient
) -> None:
    seed_fair(admin, "dining", {f"tenant-{i}": [Waiting(f"j{i}", 1_000)] for i in range(10_000)})
    length, _, shared, _, *rest = await run_command(redis_client, fair_scan_call(KEYS))
    # FAIR_SCAN_KEYS ring entries read from the left, the shared one (pushed last) among them.
    assert (length, shared, len(rest)) == (10_001, 1, 3 * (FAIR_SCAN_KEYS - 1))
    samples = await metrics(http)
    assert of(samples, "queue_fair_keys_waiting", agent_type="dining") == 10_000


async def test_a_wrong_typed_key_list_is_skipped_and_counted(
    admin: redis.Redis, exporter: Exporter
) -> None:
    seed_fair(admin, "dining", {"acme": [Waiting("a1", 5_000)], "globex": []})
    admin.set(KEYS.fair_list("globex"), "not a list")
    result = await exporter.scrape()
    assert result.snapshot is not None
    [dining] = result.snapshot.types
    assert dining.fair is not None and dining.fair.keys_waiting == 2
    assert dining.fair.oldest_wait_seconds == dining.fair.median_wait_seconds
    assert result.snapshot.malformed == 1


async def test_a_wrong_typed_ring_is_refused_and_the_rest_of_the_type_stands(
    admin: redis.Redis, redis_client: RedisClient, exporter: Exporter
) -> None:
    seed_type(admin, "dining", waiting=2)
    seed_fair(admin, "dining", {"acme": [Waiting("a1")]})
    admin.delete(KEYS.queued)
    admin.set(KEYS.queued, "x")  # the ring is fine, the queued hash is not
    with pytest.raises(redis.ResponseError, match=r"^CORRUPT 2 holds a string"):
        await run_command(redis_client, fair_scan_call(KEYS))
    result = await exporter.scrape()
    # HLEN of `queued` fails too: the type is skipped as a whole, counted once.
    assert result.snapshot is not None and result.snapshot.types == ()
    admin.delete(KEYS.queued)
    admin.delete(KEYS.fair_ring)
    admin.hset(KEYS.fair_ring, "acme", "1")
    with pytest.raises(redis.ResponseError, match=r"^CORRUPT 1 holds a hash"):
        await run_command(redis_client, fair_scan_call(KEYS))


async def test_a_type_without_a_ring_costs_one_llen_and_no_script(
    admin: redis.Redis, exporter: Exporter
) -> None:
    fair_commands = [c for c in type_commands(KEYS) if KEYS.fair_ring in c]
    assert fair_commands == [("LLEN", KEYS.fair_ring)]
    seed_type(admin, "dining", waiting=2)
    await exporter.scrape()  # the first scrape discovers the type
    admin.config_resetstat()
    result = await exporter.scrape()
    assert result.snapshot is not None and result.snapshot.round_trips == 1
    [dining] = result.snapshot.types
    assert (dining.fair_ring_length, dining.fair) == (0, None)
    stats = sync_reply(admin.info("commandstats"))
    assert not [name for name in stats if "eval" in name]


def test_the_top_keys_setting_is_bounded() -> None:
    assert ExporterSettings.from_args([]).fair_key_top == 0
    top = ExporterSettings.from_env({"EXPORTER_FAIR_KEY_TOP": str(MAX_FAIR_KEY_TOP)})
    assert top.fair_key_top == MAX_FAIR_KEY_TOP
    with pytest.raises(ConfigurationError, match="EXPORTER_FAIR_KEY_TOP"):
        ExporterSettings.from_env({"EXPORTER_FAIR_KEY_TOP": str(MAX_FAIR_KEY_TOP + 1)})
