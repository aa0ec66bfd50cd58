"""The overview's chart without Prometheus, from the history the workers record in Redis
(samples written by the history script itself, at explicit minutes of Redis' clock):
the minutes' counts, a reset and a malformed history shown as gaps (logged once), the
last day in 24-minute bars, and a bad window refused."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient
from tests.console.conftest import HOSTILE, PREFIX
from tests.support.recorded_history import MINUTE, this_minute
from tests.support.recorded_history import record as record_sample

DINING = QueueKeys("dining")
_LEGEND = re.compile(r'<span class="legend">([^<]*)</span>')


async def record(
    queue: JobQueue, raw: RedisClient, minute_ms: int, completed: int, failed: int
) -> None:
    await record_sample(queue, raw, "dining", minute_ms, completed=completed, failed=failed)


def legend(page: str) -> str:
    """The legend of dining's chart (the overview shows the configured types too)."""
    head = f'<th scope="row"><a href="{PREFIX}/types/dining">'
    rows = [row for row in page.split("<tr>") if head in row]
    assert len(rows) == 1, "no row of dining"
    found = _LEGEND.findall(rows[0])
    assert len(found) == 1, found
    return html.unescape(found[0])


@pytest.fixture(autouse=True)
async def dining(queue: JobQueue) -> None:
    await queue.connection.register_type("dining")


async def test_without_prometheus_the_chart_shows_the_recorded_minutes(
    queue: JobQueue, client: httpx.AsyncClient, redis_client: RedisClient
) -> None:
    now = await this_minute(redis_client)
    for back, completed, failed in ((3, 10, 0), (2, 14, 1), (1, 20, 1), (0, 26, 1)):
        await record(queue, redis_client, now - back * MINUTE, completed, failed)
    await redis_client.hset(DINING.stats, mapping={"completed": 29, "failed": 3})  # now
    page = (await client.get(f"{PREFIX}/")).text
    # Minutes -3..0: 4+1, 6+0, 6+0, then 3+2 up to the counters read now.
    assert legend(page) == "19 completed, 3 failed (4 of 60 min in the history)"
    assert "the history the workers record in Redis" in page
    assert re.search(r"<title>[0-9:]+ UTC: 4 completed, 1 failed</title>", page)


async def test_a_reset_counter_is_a_gap_not_a_negative_minute(
    queue: JobQueue, client: httpx.AsyncClient, redis_client: RedisClient
) -> None:
    now = await this_minute(redis_client)
    await record(queue, redis_client, now - 2 * MINUTE, 500, 9)
    await record(queue, redis_client, now - MINUTE, 2, 0)  # the stats hash was recreated
    await record(queue, redis_client, now, 5, 0)
    page = (await client.get(f"{PREFIX}/")).text
    assert legend(page) == "3 completed, 0 failed (2 of 60 min in the history)"


async def test_a_malformed_history_is_a_gap_logged_once(
    queue: JobQueue,
    client: httpx.AsyncClient,
    redis_client: RedisClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = await this_minute(redis_client)
    await record(queue, redis_client, now - MINUTE, 1, 0)
    await redis_client.xadd(DINING.history, {"at": "soon", "completed": HOSTILE}, id=f"{now}-0")
    for _ in range(2):
        page = (await client.get(f"{PREFIX}/")).text
        assert "0 of 60 min in the history" in legend(page)
    await redis_client.delete(DINING.history)
    await redis_client.set(DINING.history, HOSTILE)  # a key of another type
    for _ in range(2):
        page = (await client.get(f"{PREFIX}/")).text
        assert "this console's own readings" in page and "alert(" not in legend(page)
    warnings = [r.getMessage() for r in caplog.records if "history of agent type" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert "does not parse" in warnings[0] and "WRONGTYPE" in warnings[1]


async def test_the_last_day_in_bars_of_24_minutes(
    queue: JobQueue, client: httpx.AsyncClient, redis_client: RedisClient
) -> None:
    now = await this_minute(redis_client)
    await record(queue, redis_client, now - 300 * MINUTE, 100, 0)
    await record(queue, redis_client, now - 299 * MINUTE, 107, 2)
    await redis_client.hset(DINING.stats, mapping={"completed": 200, "failed": 2})
    page = (await client.get(f"{PREFIX}/", params={"window": "day"})).text
    assert "Last day (per 24 min)" in page
    assert legend(page) == "7 completed, 2 failed (1 of 60 bars of 24 min in the history)"
    assert re.search(r"UTC \(\+24 min\): 7 completed, 2 failed</title>", page)


async def test_a_window_that_is_none_of_the_choices_is_refused(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{PREFIX}/", params={"window": HOSTILE})
    assert response.status_code == 400
    assert "window: one of hour, day" in response.text and HOSTILE not in response.text
