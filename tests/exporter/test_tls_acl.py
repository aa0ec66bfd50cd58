"""TLS (rediss:// + CA file) and a read-only ACL user (password in URL or file)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from platform_common.jobs import acl
from platform_common.jobs.queue import JobQueue
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.exporter_data import of, parse, seed_type
from tests.support.fair_share_data import enqueue_keyed, plant_waits
from tests.support.redis_server import RedisServer

ADMIN_PASSWORD = "admin-pw-0451"
EXPORTER_PASSWORD = "exporter-pw-7731-secret"
# The package's read-only exporter role (platform_common.jobs.acl): its direct commands,
# the commands its script calls (Redis checks those against the caller too), the
# connection handshake, and read-only access to the queue keys. Nothing more.
EXPORTER_RULE = " ".join(["exporter", "on", f">{EXPORTER_PASSWORD}", *acl.rules("exporter")])


@pytest.fixture(scope="module")
def tls_acl_redis() -> Iterator[RedisServer]:
    server = RedisServer(
        tls=True,
        acl_users=[f"default on >{ADMIN_PASSWORD} ~* &* +@all", EXPORTER_RULE],
    ).start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def admin(tls_acl_redis: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(
        port=tls_acl_redis.port,
        password=ADMIN_PASSWORD,
        ssl=True,
        ssl_ca_certs=tls_acl_redis.ca_file,
        decode_responses=True,
    )
    client.flushall()
    try:
        yield client
    finally:
        client.close()


async def scrape_text(url: str, *flags: str) -> tuple[str, Exporter]:
    exporter = Exporter(
        ExporterSettings.from_args(["--redis-url", url, "--redis-timeout", "2", *flags])
    )
    try:
        result = await exporter.scrape()
        return exporter.render(result, None)[0].decode(), exporter
    finally:
        await exporter.aclose()


async def test_tls_and_read_only_acl_user(admin: redis.Redis, tls_acl_redis: RedisServer) -> None:
    seed_type(admin, "dining", waiting=3, dead=2, stats={"enqueued": 5},
              heartbeats_age_ms={"w1": 100})  # fmt: skip
    url = tls_acl_redis.url_for("exporter", EXPORTER_PASSWORD)
    assert url.startswith("rediss://") and "ssl_ca_certs=" in url
    text, _ = await scrape_text(url)
    samples = parse(text)
    assert of(samples, "queue_exporter_redis_up") == 1
    assert of(samples, "queue_depth", agent_type="dining") == 3
    assert of(samples, "dead_letter_depth", agent_type="dining") == 2
    assert of(samples, "active_workers", agent_type="dining") == 1
    assert EXPORTER_PASSWORD not in text


async def test_the_exporter_user_reads_fair_share_with_plain_reads(
    admin: redis.Redis, tls_acl_redis: RedisServer
) -> None:
    # The real enqueue (as the admin) writes the ring, the lists and the since hash; the
    # exporter user reads HLEN and HGETALL of the since hash and, with --fair-key-top,
    # LLEN of each key's list: no refusal, so nothing counted as malformed.
    queue = await JobQueue.connect(tls_acl_redis.url_for("default", ADMIN_PASSWORD))
    try:
        await queue.set_limits("dining", fair_by="tenant")
        await enqueue_keyed(queue, "dining", {"acme": 2, "globex": 1})
    finally:
        await queue.aclose()
    plant_waits(admin, "dining", {"acme": 120_000, "globex": 5_000})
    url = tls_acl_redis.url_for("exporter", EXPORTER_PASSWORD)
    text, _ = await scrape_text(url, "--fair-key-top", "1")
    samples = parse(text)
    assert of(samples, "queue_fair_keys_waiting", agent_type="dining") == 2
    oldest = of(samples, "queue_fair_key_oldest_wait_seconds", agent_type="dining")
    assert oldest is not None and oldest >= 120  # planted before the scrape read TIME
    assert of(samples, "queue_fair_key_backlog", agent_type="dining", fair_key="acme") == 2
    assert of(samples, "queue_exporter_malformed_values_total") == 0


def test_the_exporter_user_cannot_write(admin: redis.Redis, tls_acl_redis: RedisServer) -> None:
    user = redis.Redis(
        port=tls_acl_redis.port,
        username="exporter",
        password=EXPORTER_PASSWORD,
        ssl=True,
        ssl_ca_certs=tls_acl_redis.ca_file,
    )
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.lpush("jobs:{dining}:queue", "x")
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.eval("return redis.call('DEL', KEYS[1])", 1, "jobs:{dining}:queue")
    finally:
        user.close()


async def test_password_from_a_file(
    admin: redis.Redis, tls_acl_redis: RedisServer, tmp_path: Path
) -> None:
    seed_type(admin, "flights", waiting=1)
    secret = tmp_path / "redis-password"
    secret.write_text(EXPORTER_PASSWORD + "\n")
    url = (
        f"rediss://exporter@127.0.0.1:{tls_acl_redis.port}/0"
        f"?ssl_ca_certs={tls_acl_redis.ca_file}&password_file={secret}"
    )
    text, _ = await scrape_text(url)
    assert of(parse(text), "queue_depth", agent_type="flights") == 1


async def test_wrong_password_is_up_0_and_never_leaks(
    admin: redis.Redis, tls_acl_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "wrong-pw-do-not-print-9913"
    caplog.set_level(logging.DEBUG)
    text, exporter = await scrape_text(tls_acl_redis.url_for("exporter", wrong))
    assert of(parse(text), "queue_exporter_redis_up") == 0
    assert any("unreachable" in record.getMessage() for record in caplog.records)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in (wrong, EXPORTER_PASSWORD, ADMIN_PASSWORD):
        assert secret not in logged
        assert secret not in text
        assert secret not in repr(exporter.settings)


async def test_plain_connection_to_a_tls_port_is_up_0(tls_acl_redis: RedisServer) -> None:
    text, _ = await scrape_text(
        f"redis://exporter:{EXPORTER_PASSWORD}@127.0.0.1:{tls_acl_redis.port}/0"
    )
    assert of(parse(text), "queue_exporter_redis_up") == 0
