"""The pure snapshot -> metric families function, one metric at a time, no Redis."""

from __future__ import annotations

import math

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from platform_common.jobs import metric_catalogue as catalogue
from platform_common.jobs.redis.memory_policy import MemoryInfo
from platform_common.jobs_exporter.collector import ScrapeResult, metric_families, registry_for
from platform_common.jobs_exporter.server_stats import ServerStats
from platform_common.jobs_exporter.snapshot import (
    LatencyHistogram,
    Snapshot,
    TypeSnapshot,
    WorkerBeat,
)
from tests.support.prometheus import promtool

DINING = TypeSnapshot(
    agent_type="dining",
    queue_depth=7,
    in_progress=2,
    delayed_depth=3,
    dead_letter_depth=4,
    counters={
        "enqueued": 20,
        "started": 16,
        "completed": 9,
        "failed": 4,
        "retried": 3,
        "dead_lettered": 4,
        "expired": 1,
    },
    latency=LatencyHistogram(((0.5, 5), (2.5, 8), (math.inf, 9)), 12.25),
    wait=LatencyHistogram(((0.5, 7), (2.5, 9), (math.inf, 9)), 3.5),
    run=LatencyHistogram(((0.5, 6), (2.5, 9), (math.inf, 9)), 4.75),
    error_classes={"TimeoutError": 5, "ValueError": 1, "other": 1},
    oldest_age_seconds=42.5,
    active_workers=2,
    last_heartbeat_seconds=1_700_000_000.25,
    workers=(WorkerBeat("host-b:7", 61.5, 3), WorkerBeat("host-a:3", 0.25)),
)
FLIGHTS = TypeSnapshot(
    agent_type="flights",
    queue_depth=0,
    in_progress=0,
    delayed_depth=0,
    dead_letter_depth=0,
    counters={"enqueued": 0},
    latency=LatencyHistogram(((math.inf, 0),), 0.0),
)
MEMORY = {
    "10.0.0.1:6379": MemoryInfo(used_bytes=1_500_000, max_bytes=2_000_000, policy="noeviction"),
    "10.0.0.2:6379": MemoryInfo(used_bytes=900_000, max_bytes=0, policy="allkeys-lru"),
}
SERVER = {
    "10.0.0.1:6379": ServerStats(connected_clients=12, blocked_clients=4, evicted_keys=0),
    "10.0.0.2:6379": ServerStats(connected_clients=3, blocked_clients=0, evicted_keys=17),
}
RESULT = ScrapeResult(
    Snapshot((DINING, FLIGHTS), types_dropped=3, memory=MEMORY, server=SERVER),
    0.004,
    malformed_total=5,
)


def samples(
    result: ScrapeResult, namespace: str = ""
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry_for(metric_families(result, namespace))).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(name: str, agent_type: str | None = None, **labels: str) -> float | None:
    if agent_type is not None:
        labels["agent_type"] = agent_type
    return samples(RESULT).get((name, tuple(sorted(labels.items()))))


@pytest.mark.parametrize(
    ("name", "dining", "flights"),
    [
        ("queue_depth", 7, 0),
        ("dead_letter_depth", 4, 0),
        ("jobs_in_progress", 2, 0),
        ("jobs_delayed", 3, 0),
        ("oldest_job_age_seconds", 42.5, 0),
        ("active_workers", 2, 0),
        ("jobs_enqueued_total", 20, 0),
        ("jobs_started_total", 16, None),
        ("jobs_completed_total", 9, None),
        ("jobs_failed_total", 4, None),
        ("jobs_retried_total", 3, None),
        ("jobs_dead_lettered_total", 4, None),
        ("jobs_expired_total", 1, None),
        ("worker_last_heartbeat_timestamp_seconds", 1_700_000_000.25, None),
    ],
)
def test_per_type_metric(name: str, dining: float, flights: float | None) -> None:
    assert value(name, "dining") == dining
    # A value missing from a snapshot (never beat, malformed) is absent, never a made-up 0.
    assert value(name, "flights") == flights


def test_latency_histogram_is_cumulative_with_sum_and_count() -> None:
    assert value("job_latency_seconds_bucket", "dining", le="0.5") == 5
    assert value("job_latency_seconds_bucket", "dining", le="2.5") == 8
    assert value("job_latency_seconds_bucket", "dining", le="+Inf") == 9
    assert value("job_latency_seconds_count", "dining") == 9
    assert value("job_latency_seconds_sum", "dining") == 12.25
    assert value("job_latency_seconds_bucket", "flights", le="+Inf") == 0


@pytest.mark.parametrize("name", ["job_wait_seconds", "job_run_seconds"])
def test_wait_and_run_histograms_beside_the_latency_one(name: str) -> None:
    histogram = DINING.wait if name == "job_wait_seconds" else DINING.run
    assert histogram is not None
    for bound, count in histogram.buckets:
        le = "+Inf" if math.isinf(bound) else repr(bound)
        assert value(f"{name}_bucket", "dining", le=le) == count
    assert value(f"{name}_sum", "dining") == histogram.sum
    assert value(f"{name}_count", "dining") == 9
    # A type whose stats hash has no usable histogram has no series, never a made-up one.
    assert value(f"{name}_count", "flights") is None


def test_failed_attempts_by_error_class() -> None:
    by_class = {
        labels: v
        for (name, labels), v in samples(RESULT).items()
        if name == "jobs_attempts_failed_total"
    }
    assert by_class == {
        (("agent_type", "dining"), ("error_class", "TimeoutError")): 5,
        (("agent_type", "dining"), ("error_class", "ValueError")): 1,
        (("agent_type", "dining"), ("error_class", "other")): 1,
    }


def test_heartbeat_age_per_worker() -> None:
    age = "worker_heartbeat_age_seconds"
    assert value(age, "dining", worker="host-b:7") == 61.5
    assert value(age, "dining", worker="host-a:3") == 0.25
    assert not [labels for (name, labels) in samples(RESULT) if name == age and
                ("agent_type", "flights") in labels]  # fmt: skip


def test_jobs_in_progress_per_worker_only_where_known() -> None:
    jobs = "worker_jobs_in_progress"
    assert value(jobs, "dining", worker="host-b:7") == 3
    # host-a:3 reported no count (a worker of an older version): no sample, never a 0.
    assert [labels for (name, labels) in samples(RESULT) if name == jobs] == [
        (("agent_type", "dining"), ("worker", "host-b:7"))
    ]


def test_redis_clients_and_evictions_per_node() -> None:
    assert value("queue_redis_connected_clients", node="10.0.0.1:6379") == 12
    assert value("queue_redis_blocked_clients", node="10.0.0.1:6379") == 4
    assert value("queue_redis_evicted_keys_total", node="10.0.0.1:6379") == 0
    assert value("queue_redis_evicted_keys_total", node="10.0.0.2:6379") == 17


def test_exporter_own_metrics() -> None:
    assert value("queue_exporter_redis_up") == 1
    assert value("queue_exporter_scrape_duration_seconds") == 0.004
    assert value("queue_exporter_malformed_values_total") == 5
    assert value("queue_exporter_agent_types_dropped") == 3


def test_redis_memory_per_node_and_whether_its_policy_is_safe() -> None:
    assert value("queue_redis_memory_used_bytes", node="10.0.0.1:6379") == 1_500_000
    assert value("queue_redis_memory_max_bytes", node="10.0.0.1:6379") == 2_000_000
    assert value("queue_redis_memory_max_bytes", node="10.0.0.2:6379") == 0  # no limit
    safe = "queue_redis_eviction_policy_safe"
    assert value(safe, node="10.0.0.1:6379", policy="noeviction") == 1
    assert value(safe, node="10.0.0.2:6379", policy="allkeys-lru") == 0


def test_memory_unread_means_no_memory_samples() -> None:
    unread = Snapshot((DINING,), memory_problem="NoPermissionError: no INFO for you")
    names = {name for name, _ in samples(ScrapeResult(unread, 0.004))}
    assert "queue_depth" in names
    assert not {n for n in names if n.startswith("queue_redis_")}


def test_redis_down_shows_no_queue_numbers() -> None:
    down = samples(ScrapeResult(None, 2.0, malformed_total=5))
    assert down == {
        ("queue_exporter_redis_up", ()): 0,
        ("queue_exporter_scrape_duration_seconds", ()): 2.0,
        ("queue_exporter_malformed_values_total", ()): 5,
    }


def test_every_catalogue_metric_is_emitted_with_its_type_help_and_labels() -> None:
    families = {f.name: f for f in metric_families(RESULT)}
    for metric in catalogue.CATALOGUE:
        family = families[metric.family]
        assert family.type == metric.type
        assert family.documentation == metric.help
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(metric.labels)
    assert len(families) == len(catalogue.CATALOGUE)


def test_namespace_prefixes_every_name() -> None:
    names = {name for name, _ in samples(RESULT, "acme")}
    assert "acme_queue_depth" in names
    assert "acme_jobs_enqueued_total" in names
    assert "acme_job_latency_seconds_bucket" in names
    assert all(name.startswith("acme_") for name in names)


def test_same_input_same_output() -> None:
    # Pure: no hidden state between calls.
    first = generate_latest(registry_for(metric_families(RESULT)))
    assert generate_latest(registry_for(metric_families(RESULT))) == first


def test_promtool_accepts_the_text_exposition() -> None:
    text = generate_latest(registry_for(metric_families(RESULT))).decode()
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_openmetrics_exposition_parses_strictly() -> None:
    # promtool 2.42 lints only the text format; the OpenMetrics parser is strict instead
    # (units, _total, # EOF, histogram shape).
    # prometheus_client's OpenMetrics module is untyped (its text-format one is typed).
    registry = registry_for(metric_families(RESULT))
    text = generate_openmetrics(registry).decode()  # type: ignore[no-untyped-call]
    families = {f.name: f for f in openmetrics_families(text)}  # type: ignore[no-untyped-call]
    assert families["job_latency_seconds"].unit == "seconds"
    assert families["jobs_enqueued"].type == "counter"
    assert text.endswith("# EOF\n")
