"""The dining handler of the README's queue example: what a worker calls once per job.

    python -m platform_common.jobs worker --agent-type dining \\
        --handler examples.dining:find_restaurants
"""

from __future__ import annotations

from typing import Any

from platform_common.jobs.queue import JobPayload


async def find_restaurants(job: JobPayload) -> list[dict[str, Any]]:
    """One option per shortlisted restaurant, within the job's price limit; the return
    value is the job's result (JSON), stored for `ttl_seconds`."""
    limit = job.constraints.get("max_price_per_person")
    return [{"restaurant": name, "max_price_per_person": limit} for name in job.curated_shortlist]
