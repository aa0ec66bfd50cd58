"""`agentjobs info` without Prometheus: the counts of the last minute, hour or day from
the history the workers record in Redis (samples written by the history script at
explicit minutes), a type without samples or with reset counters shown as none (with no
history at all, the totals: test_info_prometheus.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient
from tests.cli.runner import table_row
from tests.support.queue_runtime import fast_settings
from tests.support.recorded_history import MINUTE, record, this_minute

# The history is read alike on a cluster (tests/queue/test_history.py): here the command.
ON_THE_SINGLE_NODE = pytest.mark.single_node("the history's reader runs on a cluster elsewhere")


def recorded(redis_url: str, raw_samples: dict[str, list[tuple[int, dict[str, int]]]]) -> None:
    """Per type, (minutes before Redis' current one, counters) sampled there, in order;
    a pair at NOW sets the counters as they stand when info reads them."""

    async def write() -> None:
        async with await JobQueue.connect(fast_settings(redis_url)) as queue:
            raw: RedisClient = queue.connection.client
            now = await this_minute(raw)
            for agent_type, samples in raw_samples.items():
                for back, counters in samples:
                    if back < 0:  # the counters as they stand now
                        await raw.hset(queue.connection.keys(agent_type).stats, mapping=counters)
                    else:
                        await record(queue, raw, agent_type, now - back * MINUTE, **counters)

    asyncio.run(write())


NOW = -1


@ON_THE_SINGLE_NODE
def test_info_without_prometheus_prints_the_last_hour_from_the_history(
    agentjobs: Any, redis_url: str
) -> None:
    recorded(redis_url, {
        "dining": [(70, {"enqueued": 1, "completed": 0, "failed": 0}),  # before the hour
                   (60, {"enqueued": 5, "completed": 2, "failed": 0}),
                   (30, {"enqueued": 8, "completed": 4, "failed": 1}),
                   (1, {"enqueued": 10, "completed": 9, "failed": 1}),
                   (NOW, {"enqueued": 12, "completed": 9, "failed": 1})],
        "flights": [(40, {"enqueued": 50, "completed": 50, "failed": 0}),
                    (NOW, {"enqueued": 3, "completed": 3, "failed": 0})],  # reset since
    })  # fmt: skip
    document = agentjobs("info", "dining", "flights", "dmc", "--window", "1h", "-o", "json").json()
    dining, flights, dmc = document["types"]
    assert (document["window"], document["last_minute_source"]) == ("1h", "history")
    counts = dict(dining["last_minute"])
    seconds = counts.pop("seconds")
    assert counts == {"enqueued": 7, "completed": 7, "failed": 1, "source": "history"}
    assert 3600 <= seconds <= 3660
    assert flights["last_minute"] is None and dmc["last_minute"] is None

    table = agentjobs("info", "dining", "dmc", "--window", "1h")
    assert (table.code, table.err) == (0, "")
    assert table_row(table.out, "TYPE")[7:10] == ["ENQUEUED (1h)", "COMPLETED (1h)", "FAILED (1h)"]
    assert table_row(table.out, "dining")[7:10] == ["7", "7", "1"]
    assert table_row(table.out, "dmc")[7:10] == ["—", "—", "—"]
    assert "from the history the workers record in Redis" in table.out

    # The last minute: since the sample of the minute before (60 to 120 s ago).
    minute = agentjobs("info", "dining", "-o", "json").json()["types"][0]["last_minute"]
    assert (minute["enqueued"], minute["completed"], minute["source"]) == (2, 0, "history")
    assert 60 <= minute["seconds"] < 120


@ON_THE_SINGLE_NODE
def test_a_history_younger_than_the_window_says_its_span(agentjobs: Any, redis_url: str) -> None:
    recorded(redis_url, {"dining": [(10, {"enqueued": 2}), (NOW, {"enqueued": 9})]})
    document = agentjobs("info", "dining", "--window", "1d", "-o", "json").json()
    counts = document["types"][0]["last_minute"]
    assert counts["enqueued"] == 7 and 600 <= counts["seconds"] < 660
