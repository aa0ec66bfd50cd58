"""TLS everywhere a URL can say rediss://: the JobStore, a producer, a worker, the
completion stream and the exporter against a TLS-only redis-server that demands a
client certificate; without the certificate (or without TLS) nothing gets in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from platform_common.jobs import BackendUnavailable, make_job_store
from platform_common.jobs.queue import JobPayload, JobQueue
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import fast_settings, running_worker
from tests.support.redis_server import RedisServer


@pytest.fixture(scope="module")
def mtls_server() -> Iterator[RedisServer]:
    with RedisServer(tls=True, tls_auth_clients=True) as server:
        yield server


@pytest.fixture
def mtls_url(mtls_server: RedisServer) -> str:
    """The server's rediss:// URL with the CA and the client certificate."""
    mtls_server.cli("FLUSHALL")
    return (
        f"{mtls_server.url}&ssl_certfile={mtls_server.client_cert}"
        f"&ssl_keyfile={mtls_server.client_key}"
    )


async def echo(job: JobPayload) -> dict[str, str]:
    return {"echo": job.job_id}


async def test_store_queue_worker_completions_and_exporter_over_mutual_tls(
    mtls_url: str, mtls_server: RedisServer
) -> None:
    store = make_job_store(mtls_url, agent="tls-agent")
    try:
        await store.create("secure-1", {"x": 1}, ttl_seconds=60)
        record = await store.get("secure-1")
        assert record is not None and record.payload == {"x": 1}
    finally:
        await store.close()

    settings = fast_settings(mtls_url)
    assert settings.redis.tls and settings.redis.ssl_certfile
    jobs = [make_job(task=f"tls {i}") for i in range(3)]
    async with await JobQueue.connect(settings) as queue:
        completions = queue.completions(watch=[("dining", j["job_id"]) for j in jobs])
        try:
            await completions.resync()  # subscribes over TLS before the jobs can finish
            await queue.enqueue_many(jobs)
            async with running_worker(settings, echo):
                seen = set()
                async for completion in completions:
                    assert completion.result is not None and completion.result.ok
                    seen.add(completion.job_id)
                    if len(seen) == len(jobs):
                        break
        finally:
            await completions.aclose()
        assert seen == {j["job_id"] for j in jobs}
        assert (await queue.stats("dining")).counters["completed"] == 3

    exporter = Exporter(ExporterSettings.from_args(["--redis-url", mtls_url]))
    try:
        assert await exporter.ready()
        result = await exporter.scrape()
    finally:
        await exporter.aclose()
    assert result.snapshot is not None
    [dining] = [t for t in result.snapshot.types if t.agent_type == "dining"]
    assert dining.counters["completed"] == 3
    # Every connection above was TLS: the server listens on nothing else.
    assert mtls_server.cli("CONFIG", "GET", "port").split() == ["port", "0"]


async def test_without_a_client_certificate_the_server_refuses(mtls_server: RedisServer) -> None:
    store = make_job_store(mtls_server.url, agent="tls-agent")  # CA only, no client cert
    try:
        with pytest.raises(BackendUnavailable):
            await store.get("anything")
    finally:
        await store.close()
    exporter = Exporter(ExporterSettings.from_args(["--redis-url", mtls_server.url]))
    try:
        assert not await exporter.ready()
    finally:
        await exporter.aclose()


async def test_plain_tcp_to_a_tls_port_is_refused(mtls_server: RedisServer) -> None:
    settings = fast_settings(f"redis://127.0.0.1:{mtls_server.port}/0")
    with pytest.raises(BackendUnavailable) as caught:
        async with await JobQueue.connect(settings):
            pass
    assert "unreachable" in str(caught.value) and caught.value.__cause__ is not None


def test_every_url_option_reaches_the_client(mtls_url: str) -> None:
    settings = fast_settings(mtls_url).redis
    kwargs = settings.client_kwargs()
    assert kwargs["ssl"] is True and kwargs["ssl_certfile"].endswith("client.crt")
    assert kwargs["ssl_keyfile"].endswith("client.key") and kwargs["ssl_ca_certs"]
