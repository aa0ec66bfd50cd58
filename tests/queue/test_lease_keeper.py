"""The lease keeper's loop watch, fed times directly (no thread, no Redis, no sleeping):
one stall is one WARNING and one "free again", even when the watching thread itself is
starved of CPU in the middle of it (seen on a loaded CI machine as two WARNINGs naming
the same blocked job)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest

from platform_common.jobs.queue import QueueSettings
from platform_common.jobs.queue.backend_errors import RedisHealth
from platform_common.jobs.worker.lease_keeper import LeaseKeeper

LOGGER = "tests.lease_keeper"


@pytest.fixture
def keeper() -> Iterator[LeaseKeeper]:
    settings = QueueSettings()  # a 10 s lease: a stall is a lag over 3.33 s
    log = logging.getLogger(LOGGER)
    loop = asyncio.new_event_loop()
    try:
        yield LeaseKeeper(
            settings, "dining", loop=loop, on_lost=lambda job_id, token: None,
            health=RedisHealth(log, settings.redis), logger=log,
        )  # fmt: skip
    finally:
        loop.close()


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{record.levelname} {record.getMessage()[:22]}"
        for record in caplog.records
        if record.name == LOGGER
    ]


def test_a_stall_the_watcher_is_starved_in_is_reported_once(
    keeper: LeaseKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger=LOGGER)
    keeper.beat()
    start = time.monotonic()
    keeper.observe(start + 4)  # the loop has not beaten for 4 s: a stall
    keeper.observe(start + 9, paused=True)  # the watcher itself ran 5 s late
    keeper.observe(start + 14)  # still the same stall
    assert lines(caplog) == ["WARNING event loop blocked for"]
    keeper.beat()
    keeper.observe(time.monotonic())
    assert lines(caplog) == ["WARNING event loop blocked for", "INFO event loop free again "]
    assert keeper.stalls == 1


def test_a_paused_process_is_not_blamed_on_the_loop(
    keeper: LeaseKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGSTOP or starvation with no stall reported: the lag counts from the resume."""
    caplog.set_level("INFO", logger=LOGGER)
    keeper.beat()
    start = time.monotonic()
    keeper.observe(start + 20, paused=True)
    keeper.observe(start + 21)
    assert lines(caplog) == [] and keeper.stalls == 0
