"""The exporter against a real redis-server holding hand-written data in the queue layout.

Covers the snapshot read (depths equal what Redis holds, Redis TIME for ages and
heartbeats), one round trip per scrape, discovery and its cap, malformed data, SCRIPT
FLUSH, and the HTTP endpoints with content negotiation. TLS and ACL are in
test_tls_acl.py, outages in test_outage.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from platform_common.jobs.keys import QueueKeys, latency_bucket_field
from platform_common.jobs.queue import JobQueue, QueueSettings
from platform_common.jobs_exporter.label_values import MAX_LABEL_VALUE_BYTES
from platform_common.jobs_exporter.reader import make_exporter_client
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from platform_common.jobs_exporter.snapshot import HEARTBEAT_CLOCK_TOLERANCE_MS
from tests.support.exporter_data import of, parse, seed_type
from tests.support.prometheus import promtool
from tests.support.sync_redis import sync_reply


class CountingConnection(Connection):
    """Counts writes to the socket: one per command or per pipeline (a round trip)."""

    sends = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sends += 1
        await super().send_packed_command(command, check_health)


@pytest.fixture
async def exporter(redis_url: str) -> AsyncIterator[Exporter]:
    """This file's exporter (overriding the folder's): of `dining`, its sends to Redis
    counted (CountingConnection.sends)."""
    settings = ExporterSettings.from_args(["--redis-url", redis_url, "--agent-types", "dining"])
    CountingConnection.sends = 0
    client = make_exporter_client(settings)
    assert isinstance(client, aioredis.Redis)  # a single server: one pool
    client.connection_pool.connection_class = CountingConnection  # connections are lazy
    instance = Exporter(settings, client)
    yield instance
    await instance.aclose()


@pytest.mark.valkey  # the scrape and INFO parsing, on the second server family
async def test_depths_counters_and_histogram_match_redis(
    admin: redis.Redis, exporter: Exporter
) -> None:
    stats = {
        "enqueued": 30,
        "started": 25,
        "completed": 17,
        "failed": 3,
        "retried": 5,
        "dead_lettered": 3,
        "expired": 2,
        "cancelled": 1,
        latency_bucket_field(0.5): 10,
        latency_bucket_field(2.5): 6,
        latency_bucket_field(float("inf")): 1,
        "latency_sum": "21.75",
        "latency_count": 17,
    }
    heartbeats = {"w1": 1000, "w2": 5000, "gone": 120_000}
    seed_type(admin, "dining", waiting=7, processing=2, delayed=4, dead=3, stats=stats,
              oldest_age_ms=90_000, heartbeats_age_ms=heartbeats)  # fmt: skip
    result = await exporter.scrape()
    assert result.snapshot is not None
    [dining] = result.snapshot.types
    keys = QueueKeys("dining")
    assert dining.queue_depth == admin.zcard(keys.waiting) == 7
    assert dining.in_progress == admin.llen(keys.processing) == 2
    assert dining.delayed_depth == admin.zcard(keys.delayed) == 4
    assert dining.dead_letter_depth == admin.llen(keys.dead) == 3
    assert dict(dining.counters) == {
        "enqueued": 30, "started": 25, "completed": 17, "failed": 3,
        "retried": 5, "dead_lettered": 3, "expired": 2, "held_back_rate": 0,
        "held_back_max_running": 0, "cancelled": 1, "held_back_max_running_per_key": 0,
    }  # fmt: skip
    assert dining.latency is not None
    cumulative = dict(dining.latency.buckets)
    assert (cumulative[0.25], cumulative[0.5], cumulative[1.0]) == (0, 10, 10)
    assert (cumulative[2.5], cumulative[600.0], cumulative[float("inf")]) == (16, 16, 17)
    assert dining.latency.sum == 21.75
    # Ages and activity are measured against Redis TIME: 90 s old, two of three recent.
    assert dining.oldest_age_seconds is not None and 90 <= dining.oldest_age_seconds < 100
    assert dining.active_workers == 2
    newest = sync_reply(admin.zrevrange(keys.workers, 0, 0, withscores=True))[0][1]
    assert dining.last_heartbeat_seconds == newest / 1000


async def test_one_round_trip_per_scrape_in_the_steady_state(
    admin: redis.Redis, exporter: Exporter
) -> None:
    for name in ("dining", "flights", "dmc", "experiences", "transportation"):
        seed_type(admin, name, waiting=3, stats={"enqueued": 3})
    first = await exporter.scrape()  # discovers four new types: reads them at once
    assert first.snapshot is not None and len(first.snapshot.types) == 5
    assert first.snapshot.round_trips == 2
    before = CountingConnection.sends
    for _ in range(3):
        result = await exporter.scrape()
        assert result.snapshot is not None and result.snapshot.round_trips == 1
        assert len(result.snapshot.types) == 5
    assert CountingConnection.sends - before == 3


async def test_a_new_type_is_exported_by_the_scrape_that_discovers_it(
    admin: redis.Redis, exporter: Exporter
) -> None:
    await exporter.scrape()
    seed_type(admin, "flights", waiting=4)
    result = await exporter.scrape()
    assert result.snapshot is not None
    assert {t.agent_type: t.queue_depth for t in result.snapshot.types} == {
        "dining": 0,
        "flights": 4,
    }


async def test_cap_on_agent_types_counts_the_overflow(admin: redis.Redis, redis_url: str) -> None:
    for index in range(6):
        seed_type(admin, f"type{index}", waiting=1)
    settings = ExporterSettings.from_args(["--redis-url", redis_url, "--max-agent-types", "4"])
    exporter = Exporter(settings)
    try:
        result = await exporter.scrape()
    finally:
        await exporter.aclose()
    assert result.snapshot is not None
    assert [t.agent_type for t in result.snapshot.types] == ["type0", "type1", "type2", "type3"]
    assert result.snapshot.types_dropped == 2


async def test_malformed_values_and_wrong_key_types_never_break_a_scrape(
    admin: redis.Redis, exporter: Exporter
) -> None:
    seed_type(admin, "dining", waiting=2, stats={"enqueued": "lots", "completed": 5})
    seed_type(admin, "flights", waiting=1)
    admin.delete(QueueKeys("flights").waiting)
    admin.set(QueueKeys("flights").waiting, "not a set")  # WRONGTYPE for ZCARD
    admin.sadd(QueueKeys.types_key(), "Not A Label")
    result = await exporter.scrape()
    assert result.snapshot is not None
    assert [t.agent_type for t in result.snapshot.types] == ["dining"]
    assert result.snapshot.malformed == 3  # the counter, the broken type, the bad name
    again = await exporter.scrape()
    assert again.malformed_total == 6  # a counter: every scrape's skipped values add up
    samples = parse(exporter.render(again, None)[0].decode())
    assert of(samples, "jobs_completed_total", agent_type="dining") == 5
    assert of(samples, "jobs_enqueued_total", agent_type="dining") is None
    assert of(samples, "queue_exporter_malformed_values_total") == 6


async def test_the_depth_leaves_out_stale_ids_of_expired_jobs(
    admin: redis.Redis, exporter: Exporter
) -> None:
    # Expiry is lazy: an expired job leaves the waiting set at once, but its id stays in
    # the queue list until a worker pops and drops it. The depth counts only real waiters.
    seed_type(admin, "dining", waiting=5)
    keys = QueueKeys("dining")
    admin.zrem(keys.waiting, "dining-w0", "dining-w1")
    result = await exporter.scrape()
    assert result.snapshot is not None
    assert admin.llen(keys.queue) == 5
    assert result.snapshot.types[0].queue_depth == admin.zcard(keys.waiting) == 3
    assert result.snapshot.round_trips == 1


async def test_a_script_flush_changes_nothing(admin: redis.Redis, exporter: Exporter) -> None:
    # The exporter runs no script (its ACL user may not): a flush costs no round trip.
    seed_type(admin, "dining", waiting=5)
    await exporter.scrape()
    admin.script_flush()
    result = await exporter.scrape()
    assert result.snapshot is not None
    assert result.snapshot.types[0].queue_depth == 5
    assert result.snapshot.round_trips == 1


async def test_http_metrics_text_is_valid_for_promtool(
    admin: redis.Redis, http: httpx.AsyncClient
) -> None:
    seed_type(
        admin,
        "dining",
        waiting=3,
        dead=1,
        stats={"completed": 2, latency_bucket_field(1.0): 2, "latency_sum": "1.5"},
    )
    response = await http.get("/metrics", headers={"Accept": "text/plain"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    checked = promtool("check", "metrics", stdin=response.text)
    assert checked.returncode == 0, checked.stderr
    samples = parse(response.text)
    assert of(samples, "queue_depth", agent_type="dining") == 3
    assert of(samples, "dead_letter_depth", agent_type="dining") == 1
    assert of(samples, "job_latency_seconds_bucket", agent_type="dining", le="1.0") == 2
    assert of(samples, "queue_exporter_redis_up") == 1


async def test_http_negotiates_openmetrics(admin: redis.Redis, http: httpx.AsyncClient) -> None:
    seed_type(admin, "dining", waiting=1)
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    response = await http.get("/metrics", headers={"Accept": accept})
    assert response.headers["content-type"].startswith(
        "application/openmetrics-text; version=1.0.0"
    )
    assert response.text.endswith("# EOF\n")
    assert 'queue_depth{agent_type="dining"} 1.0' in response.text


async def test_health_and_readiness(http: httpx.AsyncClient) -> None:
    assert (await http.get("/healthz")).status_code == 200
    ready = await http.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "redis": "reachable"})


async def test_runbooks_are_served_beside_the_metrics(http: httpx.AsyncClient) -> None:
    index = await http.get("/runbooks/")
    assert index.status_code == 200
    assert "text/html" in index.headers["content-type"]


@pytest.mark.valkey  # the scrape and INFO parsing, on the second server family
async def test_redis_clients_and_evictions_come_in_the_same_round_trip(
    admin: redis.Redis, exporter: Exporter
) -> None:
    seed_type(admin, "dining", waiting=1, stats={"enqueued": 1})
    await exporter.scrape()
    before = CountingConnection.sends
    result = await exporter.scrape()
    assert CountingConnection.sends - before == 1
    snapshot = result.snapshot
    assert snapshot is not None and snapshot.round_trips == 1
    [(node, server)] = snapshot.server.items()
    assert node in snapshot.memory
    info = sync_reply(admin.info("clients")) | sync_reply(admin.info("stats"))
    assert server.evicted_keys == info["evicted_keys"] == 0
    # The admin client and the exporter's connection, at least.
    assert server.connected_clients >= 2
    assert server.blocked_clients == info["blocked_clients"]


async def test_per_worker_heartbeat_ages_against_redis_time(
    admin: redis.Redis, exporter: Exporter
) -> None:
    keys = QueueKeys("dining")
    seed_type(admin, "dining", waiting=0, stats={})
    seconds, micros = sync_reply(admin.time())
    now_ms = seconds * 1000 + micros // 1000
    admin.zadd(keys.workers, {"host-a:1": now_ms + 500, "host-b:2": now_ms - 90_000})
    result = await exporter.scrape()
    assert result.snapshot is not None
    [dining] = result.snapshot.types
    ages = {beat.worker: beat.age_seconds for beat in dining.workers}
    assert list(ages) == ["host-b:2", "host-a:1"]  # stalest first
    assert ages["host-b:2"] >= 90 and ages["host-a:1"] == 0  # a clock ahead is never negative
    assert dining.active_workers == 1


async def test_a_heartbeat_dated_in_the_future_is_not_an_active_worker(
    admin: redis.Redis, exporter: Exporter
) -> None:
    # Beats past Redis' clock (a clock stepped back after they were written, or written
    # by hand, up to +inf) say nothing of their workers: the queue never prunes them, so
    # believed they would keep a dead fleet "active" until the clock caught up, forever.
    keys = QueueKeys("dining")
    seed_type(admin, "dining", waiting=0, stats={})
    seconds, micros = sync_reply(admin.time())
    now_ms = seconds * 1000 + micros // 1000
    ahead_ms = now_ms + HEARTBEAT_CLOCK_TOLERANCE_MS + 3_600_000
    admin.zadd(keys.workers, {"alive": now_ms, "ahead": ahead_ms, "ghost": "+inf"})
    admin.hset(keys.worker_jobs, mapping={"alive": 1, "ahead": 2, "ghost": 3})
    result = await exporter.scrape()
    assert result.snapshot is not None
    [dining] = result.snapshot.types
    assert dining.active_workers == 1
    assert dining.last_heartbeat_seconds == now_ms / 1000
    assert [beat.worker for beat in dining.workers] == ["alive"]
    assert result.snapshot.malformed == 2  # counted, so the malformed-values alert says so
    samples = parse(exporter.render(result, None)[0].decode())
    assert of(samples, "active_workers", agent_type="dining") == 1
    assert of(samples, "worker_heartbeat_age_seconds", agent_type="dining", worker="ahead") is None
    assert of(samples, "worker_jobs_in_progress", agent_type="dining", worker="ahead") is None


async def test_long_worker_ids_and_error_classes_are_capped_and_stay_distinct(
    admin: redis.Redis, exporter: Exporter
) -> None:
    keys = QueueKeys("dining")
    head = "pod-" + "é" * 150  # multi-byte: the cut must fall between characters
    workers = {f"{head}-one": 5_000, f"{head}-two": 1_000, "host:1:abc": 0}
    errors = {f"error:Err{'x' * 300}A": 1, f"error:Err{'x' * 300}B": 2, "error:KeyError": 4}
    seed_type(admin, "dining", stats=errors, heartbeats_age_ms=workers)
    admin.hset(keys.worker_jobs, mapping={f"{head}-one": 3, f"{head}-two": 7})
    result = await exporter.scrape()
    samples = parse(exporter.render(result, None)[0].decode())
    ages = {dict(labels)["worker"]: value for (name, labels), value in samples.items()
            if name == "worker_heartbeat_age_seconds"}  # fmt: skip
    jobs = {dict(labels)["worker"]: value for (name, labels), value in samples.items()
            if name == "worker_jobs_in_progress"}  # fmt: skip
    failed = {dict(labels)["error_class"]: value for (name, labels), value in samples.items()
              if name == "jobs_attempts_failed_total"}  # fmt: skip
    assert len(ages) == 3 and len(failed) == 3  # distinct values stay distinct series
    for label in [*ages, *failed]:
        assert len(label.encode()) <= MAX_LABEL_VALUE_BYTES, label
    assert "host:1:abc" in ages and failed["KeyError"] == 4  # short ones as they are
    pods = [label for label in ages if label.startswith("pod-")]
    [newer, older] = sorted(pods, key=ages.__getitem__)
    assert older.startswith("pod-é") and "~" in older  # the head, then the digest
    assert (jobs[older], jobs[newer]) == (3, 7)  # counts found by the full id
    assert sorted(failed.values()) == [1, 2, 4]


async def test_jobs_in_progress_per_worker_for_the_workers_shown(
    admin: redis.Redis, exporter: Exporter
) -> None:
    keys = QueueKeys("dining")
    seed_type(admin, "dining", waiting=0, stats={})
    seconds, micros = sync_reply(admin.time())
    now_ms = seconds * 1000 + micros // 1000
    admin.zadd(keys.workers, {"busy": now_ms, "idle": now_ms, "old": now_ms, "odd": now_ms})
    # "old" never wrote a count (an older worker version); "gone" has no heartbeat.
    admin.hset(keys.worker_jobs, mapping={"busy": 4, "idle": 0, "odd": "x", "gone": 2})
    result = await exporter.scrape()
    assert result.snapshot is not None
    [dining] = result.snapshot.types
    jobs = {beat.worker: beat.jobs_in_progress for beat in dining.workers}
    assert jobs == {"busy": 4, "idle": 0, "old": None, "odd": None}
    assert result.snapshot.malformed == 1  # "x"


async def test_queue_paused_follows_pause_and_resume(
    admin: redis.Redis, redis_url: str, http: httpx.AsyncClient
) -> None:
    seed_type(admin, "dining", waiting=2)
    queue = await JobQueue.connect(QueueSettings.from_url(redis_url, pool_min=1))
    try:
        readings = []
        for change in (None, queue.pause, queue.resume):
            if change is not None:
                await change("dining")
            response = await http.get("/metrics", headers={"Accept": "text/plain"})
            readings.append(of(parse(response.text), "queue_paused", agent_type="dining"))
    finally:
        await queue.aclose()
    assert readings == [0, 1, 0]


async def test_a_paused_key_of_another_type_skips_the_type_as_malformed(
    admin: redis.Redis, exporter: Exporter
) -> None:
    seed_type(admin, "dining", waiting=2)
    admin.rpush(QueueKeys("dining").paused, "not a pause")
    result = await exporter.scrape()
    assert result.snapshot is not None
    assert result.snapshot.types == ()
    assert result.snapshot.malformed == 1


async def test_the_configured_limits_follow_set_limits(
    admin: redis.Redis, redis_url: str, http: httpx.AsyncClient
) -> None:
    seed_type(admin, "dining", waiting=2)
    queue = await JobQueue.connect(QueueSettings.from_url(redis_url, pool_min=1))
    readings = []
    try:
        for change in ({}, {"rate": "30/m", "max_running": 4}, {"rate": None, "max_running": None}):
            if change:
                await queue.set_limits("dining", **change)
            samples = parse((await http.get("/metrics", headers={"Accept": "text/plain"})).text)
            readings.append(
                tuple(of(samples, name, agent_type="dining")
                      for name in ("queue_rate_limit_per_second", "queue_max_running_limit"))
            )  # fmt: skip
    finally:
        await queue.aclose()
    assert readings == [(None, None), (0.5, 4), (None, None)]  # no sample without a limit


async def test_a_malformed_limit_is_skipped_and_counted(
    admin: redis.Redis, exporter: Exporter
) -> None:
    seed_type(admin, "dining", waiting=2)
    admin.hset(QueueKeys("dining").limits, mapping={"rate": "ten", "interval_ms": "1000",
                                                    "max_running": "0"})  # fmt: skip
    result = await exporter.scrape()
    assert result.snapshot is not None
    [dining] = result.snapshot.types
    assert (dining.rate_limit, dining.max_running_limit) == (None, None)
    assert result.snapshot.malformed == 2


async def test_held_back_starts_are_counters_per_type(
    admin: redis.Redis, http: httpx.AsyncClient
) -> None:
    seed_type(admin, "dining", waiting=2, stats={"held_back_rate": 7})
    samples = parse((await http.get("/metrics", headers={"Accept": "text/plain"})).text)
    assert of(samples, "jobs_held_back_by_rate_total", agent_type="dining") == 7
    assert of(samples, "jobs_held_back_by_max_running_total", agent_type="dining") == 0
