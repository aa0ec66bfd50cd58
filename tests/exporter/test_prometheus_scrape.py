"""A real Prometheus scrapes the exporter, started by its CLI, and its API shows the values."""

from __future__ import annotations

import redis

from platform_common.jobs.keys import latency_bucket_field
from tests.support.exporter_data import seed_type
from tests.support.exporter_process import ExporterProcess
from tests.support.prometheus import PrometheusServer, Sample


def by_type(samples: list[Sample]) -> dict[str, float]:
    return {s.labels["agent_type"]: s.value for s in samples}


def test_prometheus_scrapes_the_exporter(redis_url: str, exporter_process: ExporterProcess) -> None:
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        seed_type(admin, "dining", waiting=12, dead=3, stats={
            "enqueued": 40, "completed": 25, "failed": 3,
            latency_bucket_field(0.5): 20, latency_bucket_field(5.0): 5, "latency_sum": "14.5",
        })  # fmt: skip
        seed_type(admin, "flights", waiting=2, stats={"enqueued": 2})
    finally:
        admin.close()
    target = exporter_process.url.removeprefix("http://")
    with PrometheusServer(targets=[target]) as prometheus:
        [target_info] = prometheus.wait_targets_up()
        assert target_info["labels"]["job"] == "queue-exporter"
        depth = prometheus.wait_for("queue_depth", lambda r: len(r) == 2)
        assert by_type(depth) == {"dining": 12, "flights": 2}
        assert {s.labels["instance"] for s in depth} == {target}
        assert by_type(prometheus.query("jobs_enqueued_total")) == {"dining": 40, "flights": 2}
        assert by_type(prometheus.query("jobs_completed_total")) == {"dining": 25, "flights": 0}
        assert by_type(prometheus.query("jobs_failed_total")) == {"dining": 3, "flights": 0}
        assert by_type(prometheus.query("dead_letter_depth")) == {"dining": 3, "flights": 0}
        buckets = prometheus.query('job_latency_seconds_bucket{agent_type="dining"}')
        cumulative = {s.labels["le"]: s.value for s in buckets}
        assert (cumulative["0.25"], cumulative["0.5"], cumulative["5.0"]) == (0, 20, 25)
        assert cumulative["+Inf"] == 25
        assert prometheus.query('job_latency_seconds_count{agent_type="dining"}')[0].value == 25
        [up] = prometheus.query("queue_exporter_redis_up")
        assert up.value == 1
    code, output = exporter_process.stop()
    # SIGTERM is a clean shutdown (uvicorn re-raises the signal once it has finished).
    assert code in (0, -15), output
    assert "Application shutdown complete" in output
