"""RecentCounts: the last minute's counts from readings kept while `info --watch` runs
(pure: hand-built readings, no Redis), and the worker host parsed from a default id."""

from __future__ import annotations

from platform_common.jobs.operations import Counts, Overview, RecentCounts, TypeOverview
from platform_common.jobs.operations.workers import host_of


def reading(at: float, enqueued: int, completed: int = 0, failed: int = 0) -> Overview:
    totals = Counts(enqueued, completed, failed)
    return Overview(at, (TypeOverview("dining", 0, 0, 0, 0, 0, None, totals),))


def test_the_first_reading_covers_no_time() -> None:
    recent = RecentCounts().add(reading(1000.0, 50))["dining"]
    assert (recent.counts, recent.seconds) == (Counts(0, 0, 0), 0.0)


def test_before_a_minute_it_counts_since_the_first_reading() -> None:
    counts = RecentCounts()
    counts.add(reading(1000.0, 50, 10, 1))
    recent = counts.add(reading(1020.0, 80, 30, 2))["dining"]
    assert (recent.counts, recent.seconds) == (Counts(30, 20, 1), 20.0)


def test_after_a_minute_the_baseline_is_the_newest_reading_a_minute_old() -> None:
    counts = RecentCounts()
    for second, enqueued in ((0, 0), (30, 100), (59, 150), (61, 160), (90, 400)):
        recent = counts.add(reading(1000.0 + second, enqueued))["dining"]
    # At 90 s: the 30 s reading is the newest one at least 60 s old.
    assert (recent.counts.enqueued, recent.seconds) == (300, 60.0)


def test_a_counter_that_went_backwards_was_reset_and_counts_from_zero() -> None:
    counts = RecentCounts()
    counts.add(reading(1000.0, 500))
    assert counts.add(reading(1010.0, 7))["dining"].counts.enqueued == 7


def test_the_host_comes_from_a_default_worker_id_only() -> None:
    assert host_of("web-7f9c.internal:4242:a1b2c3") == "web-7f9c.internal"
    assert host_of("test-worker-0-123") == ""
    assert host_of("my:custom:id") == ""
