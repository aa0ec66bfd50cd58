"""Parsing the snapshot script's reply, and choosing which agent types to export."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from platform_common.jobs.keys import DEFAULT_LATENCY_BUCKETS, MAX_ERROR_CLASSES
from platform_common.jobs.metric_catalogue import MAX_WORKERS_PER_TYPE
from platform_common.jobs.type_registry import scan_count, select_types
from platform_common.jobs_exporter.snapshot import TypeSnapshot, type_snapshot
from platform_common.jobs_exporter.stats_hash import BucketExemplar, parse_stats

NOW_MS = 1_700_000_100_000


def parse_type_reply(
    agent_type: str,
    reply: Sequence[object],
    bucket_bounds: Sequence[float] = DEFAULT_LATENCY_BUCKETS,
) -> tuple[TypeSnapshot, int]:
    """One type's replies -> (TypeSnapshot, malformed count), as type_snapshot takes them.

    Layout: now_ms, queue, processing, delayed, dead, stats (HGETALL, flat or a dict),
    active workers, newest heartbeat score or None, oldest job's enqueued_at or None,
    and optionally the heartbeats as (worker, score) pairs and the HGETALL of the
    worker_jobs hash."""
    now_ms, queue, processing, delayed, dead, stats, active, newest, oldest = reply[:9]
    beats: Sequence[tuple[object, object]] = reply[9] if len(reply) > 9 else ()  # type: ignore[assignment]
    worker_jobs = reply[10] if len(reply) > 10 else None
    assert isinstance(now_ms, int)
    return type_snapshot(
        agent_type, now_ms, (queue, processing, delayed, dead), parse_stats(stats, bucket_bounds),
        active, newest, oldest, beats, worker_jobs,
    )  # fmt: skip


def reply(
    stats: dict[str, str] | None = None,
    *,
    queue: int = 0,
    newest: str | None = None,
    oldest: str | None = None,
) -> list[object]:
    flat = [item for pair in (stats or {}).items() for item in pair]
    return [NOW_MS, queue, 2, 3, 4, flat, 1, newest, oldest]


def test_depths_and_workers() -> None:
    snapshot, malformed = parse_type_reply(
        "dining", reply(queue=5, newest="1700000099000", oldest=str(NOW_MS - 12_500))
    )
    assert malformed == 0
    assert (snapshot.queue_depth, snapshot.in_progress, snapshot.delayed_depth) == (5, 2, 3)
    assert snapshot.dead_letter_depth == 4
    assert snapshot.active_workers == 1
    assert snapshot.last_heartbeat_seconds == 1_700_000_099.0
    assert snapshot.oldest_age_seconds == 12.5


def test_missing_counters_are_zero_and_buckets_become_cumulative() -> None:
    stats = {
        "completed": "4",
        "latency_le:0.5": "3",
        "latency_le:10": "1",
        "latency_le:+Inf": "2",
        "latency_le:2.5": "0",
        "latency_sum": "61.5",
        "latency_count": "6",
    }
    snapshot, malformed = parse_type_reply("dining", reply(stats), (0.5, 2.5, 10.0))
    assert malformed == 0
    assert snapshot.counters["completed"] == 4
    assert snapshot.counters["enqueued"] == 0
    assert snapshot.latency is not None
    assert snapshot.latency.buckets == ((0.5, 3), (2.5, 3), (10.0, 4), (math.inf, 6))
    assert (snapshot.latency.count, snapshot.latency.sum) == (6, 61.5)


def test_configured_bounds_without_a_field_are_zero() -> None:
    snapshot, _ = parse_type_reply("dining", reply({"latency_le:1": "2"}), (0.5, 1.0, 5.0))
    assert snapshot.latency is not None
    assert snapshot.latency.buckets == ((0.5, 0), (1.0, 2), (5.0, 2), (math.inf, 2))


def test_a_bound_outside_the_configured_ones_exports_only_what_exists() -> None:
    # The queue uses other buckets: a count for 0.5 would be a guess, so there is none.
    snapshot, _ = parse_type_reply("dining", reply({"latency_le:0.75": "2"}), (0.5, 1.0))
    assert snapshot.latency is not None
    assert snapshot.latency.buckets == ((0.75, 2), (math.inf, 2))


def test_no_observations_gives_an_empty_histogram() -> None:
    snapshot, _ = parse_type_reply("dining", reply())
    assert snapshot.latency is not None
    assert [bound for bound, _ in snapshot.latency.buckets] == [*DEFAULT_LATENCY_BUCKETS, math.inf]
    assert {count for _, count in snapshot.latency.buckets} == {0}
    assert snapshot.oldest_age_seconds == 0.0
    assert snapshot.last_heartbeat_seconds is None


def test_malformed_values_are_skipped_and_counted() -> None:
    stats = {
        "enqueued": "ten",  # not a number
        "failed": "-3",  # a counter never goes below zero
        "completed": "2.5",  # HINCRBY writes integers only
        "retried": "7",
        "latency_le:abc": "1",  # unparseable bound
        "latency_le:1": "x",  # unparseable count
        "latency_le:0.5": "2",
        "latency_sum": "1.0",
    }
    snapshot, malformed = parse_type_reply(
        "dining", reply(stats, queue=1, oldest="yesterday"), (0.5,)
    )
    assert malformed == 6
    assert "enqueued" not in snapshot.counters
    assert "failed" not in snapshot.counters
    assert "completed" not in snapshot.counters
    assert snapshot.counters["retried"] == 7
    assert snapshot.latency is not None
    assert snapshot.latency.buckets == ((0.5, 2), (math.inf, 2))
    assert snapshot.oldest_age_seconds is None


def test_bad_latency_sum_drops_the_histogram_and_bad_count_is_reported() -> None:
    snapshot, malformed = parse_type_reply("dining", reply({"latency_sum": "nan"}))
    assert (snapshot.latency, malformed) == (None, 1)
    snapshot, malformed = parse_type_reply(
        "dining", reply({"latency_le:1": "2", "latency_sum": "1", "latency_count": "5"})
    )
    assert malformed == 1
    assert snapshot.latency is not None and snapshot.latency.count == 2


def test_oldest_job_age_unknown_when_its_hash_is_gone_and_never_negative() -> None:
    gone, _ = parse_type_reply("dining", reply(queue=3, oldest=None))
    assert gone.oldest_age_seconds is None
    future, malformed = parse_type_reply("dining", reply(queue=1, oldest=str(NOW_MS + 5000)))
    assert (future.oldest_age_seconds, malformed) == (0.0, 0)


def test_configured_types_first_then_discovered_sorted() -> None:
    selection = select_types(
        ("flights", "dining"),
        ["zeta", "dining", "alpha"],
        set_size=3,
        scan_complete=True,
        max_agent_types=10,
    )
    assert selection.types == ("flights", "dining", "alpha", "zeta")
    assert (selection.dropped, selection.invalid) == (0, 0)


def test_cap_counts_dropped_and_invalid_names_are_not_labels() -> None:
    discovered = [f"type{i:02d}" for i in range(10)] + ["Bad Name", "x" * 70, "a{b}"]
    selection = select_types(
        ("dining",), discovered, set_size=13, scan_complete=True, max_agent_types=4
    )
    assert selection.types == ("dining", "type00", "type01", "type02")
    assert selection.dropped == 7
    assert selection.invalid == 3


def test_members_the_scan_did_not_reach_count_as_dropped() -> None:
    selection = select_types((), ["a", "b"], set_size=50, scan_complete=False, max_agent_types=2)
    assert selection.types == ("a", "b")
    assert selection.dropped == 48
    assert scan_count(1000) == 2000


def test_wait_and_run_histograms_parse_like_the_latency_one() -> None:
    stats = {"wait_le:0.5": "3", "wait_le:+Inf": "1", "wait_sum": "9.5", "wait_count": "4",
             "run_le:2.5": "4", "run_sum": "6", "run_count": "4"}  # fmt: skip
    snapshot, malformed = parse_type_reply("dining", reply(stats), (0.5, 2.5))
    assert malformed == 0
    assert snapshot.wait is not None and snapshot.run is not None
    assert snapshot.wait.buckets == ((0.5, 3), (2.5, 3), (math.inf, 4))
    assert (snapshot.wait.count, snapshot.wait.sum) == (4, 9.5)
    assert snapshot.run.buckets == ((0.5, 0), (2.5, 4), (math.inf, 4))
    # A queue that never observed them (an older version) exports zeros, as for latency.
    fresh, _ = parse_type_reply("dining", reply(), (0.5,))
    assert fresh.wait is not None and fresh.wait.buckets == ((0.5, 0), (math.inf, 0))


def test_a_malformed_wait_sum_drops_only_that_histogram() -> None:
    snapshot, malformed = parse_type_reply("dining", reply({"wait_sum": "x", "run_sum": "1"}))
    assert (snapshot.wait, malformed) == (None, 1)
    assert snapshot.run is not None and snapshot.latency is not None


def test_error_classes_are_read_and_stay_bounded() -> None:
    stats = {f"error:Class{i:02d}": "1" for i in range(MAX_ERROR_CLASSES + 3)}
    stats |= {"error:other": "5", "error:Broken": "x", "error_classes": "23"}
    snapshot, malformed = parse_type_reply("dining", reply(stats))
    assert malformed == 1  # error:Broken
    assert len(snapshot.error_classes) == MAX_ERROR_CLASSES + 1
    assert snapshot.error_classes["other"] == 5 + 3  # the excess folded in
    assert sum(snapshot.error_classes.values()) == MAX_ERROR_CLASSES + 3 + 5


def test_worker_heartbeats_stalest_first_and_capped() -> None:
    beats = [(f"w{i}", str(NOW_MS - i * 1000)) for i in range(MAX_WORKERS_PER_TYPE + 5)]
    snapshot, malformed = parse_type_reply("dining", [*reply(), [*beats, ("bad", "soon")]])
    assert malformed == 1
    assert len(snapshot.workers) == MAX_WORKERS_PER_TYPE
    assert snapshot.workers[0].worker == f"w{MAX_WORKERS_PER_TYPE + 4}"
    assert snapshot.workers[0].age_seconds == MAX_WORKERS_PER_TYPE + 4
    assert [w.age_seconds for w in snapshot.workers] == sorted(
        (w.age_seconds for w in snapshot.workers), reverse=True
    )


TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_exemplars_lead_from_a_bucket_to_a_recent_jobs_trace() -> None:
    stats = {"latency_le:0.5": "3", "latency_le:2.5": "1", "latency_sum": "3.1",
             "latency_count": "4", "latency_ex:0.5": f"{TRACE} 0.25 1700000099123",
             "latency_ex:2.5": f"{'a' * 32} 2 1700000098000",
             "run_le:0.5": "4", "run_sum": "1", "run_count": "4",
             "run_ex:0.5": f"{TRACE} 0.125 1700000099123"}  # fmt: skip
    snapshot, malformed = parse_type_reply("dining", reply(stats), (0.5, 2.5))
    assert malformed == 0
    assert snapshot.latency is not None and snapshot.run is not None
    assert snapshot.latency.exemplars == (
        (0.5, BucketExemplar(TRACE, 0.25, 1_700_000_099.123)),
        (2.5, BucketExemplar("a" * 32, 2.0, 1_700_000_098.0)),
    )
    assert snapshot.run.exemplars == ((0.5, BucketExemplar(TRACE, 0.125, 1_700_000_099.123)),)
    assert snapshot.wait is not None and snapshot.wait.exemplars == ()


@pytest.mark.parametrize(
    "value",
    [
        f"{TRACE} 0.25",  # no time
        f"{TRACE.upper()} 0.25 1700000099123",  # W3C trace ids are lowercase hex
        f"{'0' * 32} 0.25 1700000099123",  # the invalid all-zero trace id
        f"{TRACE[:-1]} 0.25 1700000099123",
        f"{TRACE} 0.75 1700000099123",  # not within its bucket (0.5)
        f"{TRACE} nan 1700000099123",
        f"{TRACE} 0.25 17000000991230000",  # a time past 15 digits
        f"{TRACE}  0.25 1700000099123",
    ],
)
def test_a_malformed_exemplar_is_skipped_and_counted(value: str) -> None:
    stats = {"latency_le:0.5": "1", "latency_sum": "0.25", "latency_count": "1",
             "latency_ex:0.5": value}  # fmt: skip
    snapshot, malformed = parse_type_reply("dining", reply(stats), (0.5,))
    assert malformed == 1
    assert snapshot.latency is not None and snapshot.latency.exemplars == ()


def test_an_exemplar_of_a_bucket_without_jobs_or_outside_the_buckets_is_dropped() -> None:
    stats = {"latency_le:0.5": "1", "latency_sum": "0.25", "latency_count": "1",
             "latency_ex:2.5": f"{TRACE} 1 1700000099123",  # its bucket holds no job
             "latency_ex:7": f"{TRACE} 6 1700000099123"}  # fmt: skip
    snapshot, malformed = parse_type_reply("dining", reply(stats), (0.5, 2.5))
    assert malformed == 2
    assert snapshot.latency is not None and snapshot.latency.exemplars == ()
