"""The maxmemory-policy check: producers, workers and the exporter read it with INFO
memory at start and say so when Redis can evict; the exporter publishes it per node."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.memory_policy import (
    MemoryInfo,
    check_memory_policy,
    parse_memory_info,
    read_memory_info,
)
from platform_common.jobs.redis.url import RedisSettings
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.queue_runtime import fast_settings, running_worker
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer

POLICY_LOGGER = "platform_common.jobs.redis.memory_policy"
SECRET = "app-secret-pw"


def test_parse_reads_redis_py_dict_and_raw_text() -> None:
    parsed = {"used_memory": 1024, "maxmemory": 0, "maxmemory_policy": "noeviction"}
    assert parse_memory_info(parsed) == MemoryInfo(1024, 0, "noeviction")
    text = "# Memory\r\nused_memory:2048\r\nmaxmemory:4096\r\nmaxmemory_policy:allkeys-lru\r\n"
    info = parse_memory_info(text)
    assert info == MemoryInfo(2048, 4096, "allkeys-lru") and info.can_evict
    assert not parse_memory_info(parsed).can_evict


@pytest.mark.parametrize(
    ("reply", "field"),
    [
        ({"used_memory": 1, "maxmemory": 0}, "maxmemory_policy"),
        ({"used_memory": "x", "maxmemory": 0, "maxmemory_policy": "noeviction"}, "used_memory"),
        ({"used_memory": 1, "maxmemory": -1, "maxmemory_policy": "noeviction"}, "maxmemory"),
        (["not", "a", "mapping"], "mapping"),
    ],
)
def test_parse_names_what_is_wrong(reply: object, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_memory_info(reply)


@pytest.fixture(params=["allkeys-lru", "volatile-lru", "noeviction"])
def policy_server(request: pytest.FixtureRequest) -> Iterator[tuple[RedisServer, str]]:
    policy: str = request.param
    server = RedisServer(extra_args=["--maxmemory", "100mb", "--maxmemory-policy", policy])
    server.start()
    try:
        yield server, policy
    finally:
        server.cleanup()


def policy_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == POLICY_LOGGER and record.levelno == logging.WARNING
    ]


def policy_safe_samples(text: str) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["node"], sample.labels["policy"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "queue_redis_eviction_policy_safe"
    }


async def test_producer_worker_and_exporter_check_the_policy(
    policy_server: tuple[RedisServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, policy = policy_server
    unsafe = policy != "noeviction"
    node = f"127.0.0.1:{server.port}"
    caplog.set_level(logging.INFO)
    settings = fast_settings(server.url)

    async with await JobQueue.connect(settings):
        pass
    producer = policy_warnings(caplog)
    assert len(producer) == (1 if unsafe else 0), producer
    if unsafe:
        assert f"Redis at {node} has maxmemory-policy {policy}" in producer[0]
        assert "noeviction" in producer[0]
    caplog.clear()

    async with running_worker(settings, lambda payload: None):
        pass
    worker = policy_warnings(caplog)
    assert len(worker) == (1 if unsafe else 0), worker

    caplog.clear()
    exporter = Exporter(ExporterSettings.from_args(["--redis-url", server.url]))
    try:
        await exporter.check_memory_policy()
        result = await exporter.scrape()
        await exporter.scrape()  # said once at start: the scrapes do not repeat it
        text = exporter.render(result, None)[0].decode()
    finally:
        await exporter.aclose()
    said = [r.getMessage() for r in caplog.records if r.name == "exporter"]
    assert len([m for m in said if "maxmemory-policy" in m]) == (1 if unsafe else 0), said
    assert policy_safe_samples(text) == {(node, policy): 0 if unsafe else 1}
    assert result.snapshot is not None
    [(name, memory)] = result.snapshot.memory.items()
    assert name == node and memory.max_bytes == 100 * 1024 * 1024 and memory.used_bytes > 0


async def test_refused_info_is_one_line_and_nothing_else_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    users = ["default off", f"app on >{SECRET} ~* &* +@all -info"]
    server = RedisServer(acl_users=users).start()
    url = server.url_for("app", SECRET)
    caplog.set_level(logging.INFO)
    try:
        async with await JobQueue.connect(fast_settings(url)) as queue:
            assert await queue.ping()
        [line] = policy_warnings(caplog)
        assert "could not check the maxmemory-policy" in line and "NoPermissionError" in line
        assert SECRET not in line and "app:***@" in line

        caplog.clear()
        exporter = Exporter(ExporterSettings.from_args(["--redis-url", url]))
        try:
            await exporter.check_memory_policy()
            result = await exporter.scrape()
            text = exporter.render(result, None)[0].decode()
        finally:
            await exporter.aclose()
    finally:
        server.cleanup()
    said = [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert len(said) == 1 and "NoPermissionError" in said[0], said
    assert "queue_exporter_redis_up 1.0" in text  # the queue's numbers still come
    assert "queue_redis_" not in text


async def test_every_cluster_primary_is_checked(
    cluster_url: str, redis_cluster: RedisClusterNodes, caplog: pytest.LogCaptureFixture
) -> None:
    primaries = redis_cluster.master_ports()
    evicting = redis_cluster.node_by_port(primaries[1])
    settings = RedisSettings.from_url(cluster_url)
    client = settings.make_client()
    caplog.set_level(logging.INFO)
    evicting.cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    try:
        nodes = await check_memory_policy(client, settings)
        exporter = Exporter(ExporterSettings.from_args(["--redis-url", cluster_url]))
        try:
            result = await exporter.scrape()
            text = exporter.render(result, None)[0].decode()
        finally:
            await exporter.aclose()
    finally:
        evicting.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        await client.aclose()
    assert nodes is not None
    assert sorted(nodes) == sorted(f"127.0.0.1:{port}" for port in primaries)
    [warning] = policy_warnings(caplog)
    assert f"Redis at 127.0.0.1:{evicting.port} has maxmemory-policy allkeys-lru" in warning
    safe = policy_safe_samples(text)
    assert safe[(f"127.0.0.1:{evicting.port}", "allkeys-lru")] == 0
    assert sorted(v for v in safe.values()) == [0, 1, 1]


async def test_single_node_read_is_named_by_its_address(
    single_node_url: str,
) -> None:
    settings = RedisSettings.from_url(single_node_url)
    client = settings.make_client()
    try:
        nodes = await read_memory_info(client, f"{settings.host}:{settings.port}")
    finally:
        await client.aclose()
    [(name, info)] = nodes.items()
    assert name == f"127.0.0.1:{settings.port}" and info.policy == "noeviction"
