"""Agent types the console was not configured with but Redis has seen (a producer of
`billing` registered it, as every producer does): the overview lists them after the
configured ones, as the exporter does, and their pages work; a name Redis has never
seen is still a 404."""

from __future__ import annotations

import httpx

from platform_common.jobs.queue import JobQueue
from tests.console.conftest import PREFIX
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import fast_settings


async def enqueue_billing(redis_url: str, count: int) -> list[str]:
    async with await JobQueue.connect(fast_settings(redis_url, agent_types=("billing",))) as q:
        return await q.enqueue_many([make_job("billing") for _ in range(count)])


async def test_a_type_redis_has_seen_is_listed_and_has_its_pages(
    redis_url: str, queue: JobQueue, client: httpx.AsyncClient
) -> None:
    assert "billing" not in queue.settings.agent_types
    first, _ = await enqueue_billing(redis_url, 2)
    overview = (await client.get(f"{PREFIX}/")).text
    assert f'href="{PREFIX}/types/billing?list=waiting">2</a>' in overview
    # Configured types first, in their order, then the discovered one.
    rows = [overview.index(f'<th scope="row"><a href="{PREFIX}/types/{t}"') for t in
            (*queue.settings.agent_types, "billing")]  # fmt: skip
    assert rows == sorted(rows)
    waiting = await client.get(f"{PREFIX}/types/billing", params={"list": "waiting"})
    assert waiting.status_code == 200 and first in waiting.text
    job = await client.get(f"{PREFIX}/types/billing/jobs/{first}")
    assert job.status_code == 200 and "state-queued" in job.text
    for list_page in ("dead", "failed"):
        assert (await client.get(f"{PREFIX}/types/billing/{list_page}")).status_code == 200
    never = await client.get(f"{PREFIX}/types/billin")
    assert never.status_code == 404 and "unknown agent type" in never.text
