"""The dining handler of the README's queue example: what a worker calls once per job.

    python -m platform_common.jobs worker --agent-type dining \\
        --handler examples.dining:find_restaurants
"""

from __future__ import annotations

from typing import Any

from platform_common.jobs.queue import JobPayload, current_job


async def find_restaurants(job: JobPayload) -> list[dict[str, Any]]:
    """One option per shortlisted restaurant, within the job's price limit; the return
    value is the job's result (JSON), stored for `ttl_seconds`. Reports its progress
    after each restaurant (docs/user-guide.md, "Progress")."""
    limit = job.constraints.get("max_price_per_person")
    options = []
    for checked, name in enumerate(job.curated_shortlist, start=1):
        options.append({"restaurant": name, "max_price_per_person": limit})
        progress = {"checked": checked, "of": len(job.curated_shortlist), "last": name}
        await current_job().report_progress(progress)
    return options
