"""CounterHistory: the last hour per minute from readings of running totals."""

from __future__ import annotations

from platform_common.jobs.operations import CounterHistory, Counts, Overview, TypeOverview

T0 = 1_800_000_000.0  # a minute boundary (divisible by 60)


def reading(at: float, completed: int, failed: int) -> Overview:
    totals = Counts(enqueued=completed + failed, completed=completed, failed=failed)
    return Overview(at, (TypeOverview("dining", 0, 0, 0, 0, 0, None, totals),))


def test_a_single_reading_covers_no_minute() -> None:
    minutes = CounterHistory().add(reading(T0, 5, 1))["dining"]
    assert len(minutes) == 60 and not any(m.covered for m in minutes)
    assert minutes[-1].start == T0


def test_each_minute_is_the_increase_since_the_previous_minutes_last_reading() -> None:
    history = CounterHistory()
    history.add(reading(T0 + 10, 5, 1))
    history.add(reading(T0 + 50, 7, 1))  # replaces the earlier reading of this minute
    history.add(reading(T0 + 70, 10, 2))
    minutes = history.add(reading(T0 + 130, 10, 4))["dining"]
    last_three = [(m.completed, m.failed, m.covered) for m in minutes[-3:]]
    assert last_three == [(0, 0, False), (3, 1, True), (0, 2, True)]


def test_a_gap_puts_the_increase_in_the_later_minute_and_leaves_the_gap_unread() -> None:
    history = CounterHistory()
    history.add(reading(T0, 0, 0))
    minutes = history.add(reading(T0 + 300, 9, 0))["dining"]
    assert [m.covered for m in minutes[-6:]] == [False, False, False, False, False, True]
    assert minutes[-1].completed == 9


def test_readings_older_than_the_hour_are_dropped_and_a_reset_counts_from_zero() -> None:
    history = CounterHistory()
    history.add(reading(T0, 100, 0))
    history.add(reading(T0 + 60, 110, 0))
    minutes = history.add(reading(T0 + 3 * 3600, 4, 0))["dining"]  # stats hash recreated
    assert minutes[-1].completed == 4 and sum(m.covered for m in minutes) == 1
