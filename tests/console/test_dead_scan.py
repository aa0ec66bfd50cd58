"""The dead-letter page over a long list: a filter that matches rarely reads at most
MAX_SCAN letters per page (a partial page, and "Older" searches on), while "all
matching" still requeues or purges every match with its true count."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
import redis

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.operations import MAX_SCAN
from platform_common.jobs.queue import JobQueue
from tests.console.conftest import PREFIX, confirmed_form, csrf_token
from tests.support.planted import plant_dead_letters
from tests.support.sync_redis import sync_reply

DINING = QueueKeys("dining")
DEAD = f"{PREFIX}/types/dining/dead"
COUNT = MAX_SCAN + 1_000
RARE = {3, COUNT - 10}
"""The oldest letters but 3, and the 10th newest: one on each side of MAX_SCAN."""


def rare_error(n: int) -> str:
    return f"PoisonError: row {n}" if n in RARE else f"TimeoutError: try {n}"


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


def _hash_reads(raw: redis.Redis) -> int:
    stats = sync_reply(raw.info("commandstats")).get("cmdstat_hmget", {"calls": 0})
    return int(stats["calls"])


async def test_a_rare_filter_reads_a_bounded_page_and_older_searches_on(
    queue: JobQueue, client: httpx.AsyncClient, raw: redis.Redis
) -> None:
    ids = plant_dead_letters(raw, DINING, COUNT, rare_error)
    raw.config_resetstat()
    first = await client.get(DEAD, params={"error": "PoisonError"})
    assert first.status_code == 200
    assert _hash_reads(raw) == MAX_SCAN  # one job hash per letter looked at, no more
    assert ids[COUNT - 10] in first.text and ids[3] not in first.text
    assert f"1 matching “PoisonError” among the next {MAX_SCAN} of {COUNT}" in first.text
    assert f"This page searched {MAX_SCAN} dead letters" in first.text
    older = re.search(r'<a rel="next" href="([^"]+)"', first.text)
    assert older and f"start={MAX_SCAN}" in older[1]

    second = await client.get(older[1].replace("&amp;", "&"))
    assert second.status_code == 200 and ids[3] in second.text
    assert "1 matching “PoisonError” among the rest" in second.text
    assert 'rel="next"' not in second.text  # the list's end

    # A page with no match but more to search still offers the way on.
    none = await client.get(DEAD, params={"error": "NoSuchError"})
    assert "No dead letters match." in none.text and 'rel="next"' in none.text


async def test_all_matching_covers_the_whole_list(
    queue: JobQueue, client: httpx.AsyncClient, raw: redis.Redis
) -> None:
    ids = plant_dead_letters(raw, DINING, COUNT, rare_error)
    csrf = csrf_token((await client.get(DEAD)).text)
    asked = {"csrf": csrf, "do": "requeue:matching", "error": "PoisonError"}
    confirm = await client.post(f"{DEAD}/confirm", data=asked)
    assert "Requeue 2 dead letters?" in confirm.text
    done = await client.post(f"{DEAD}/act", data=confirmed_form(confirm.text))
    assert "Requeued 2 of 2" in done.text
    assert {raw.hget(DINING.job(ids[n]), "state") for n in RARE} == {None}  # queued
    assert raw.llen(DINING.dead) == COUNT - 2
