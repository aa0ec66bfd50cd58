"""A short demo of the JobStore: create, update and list jobs through make_job_store().

Starts its own redis-server on a free port (never the machine's own), points
JOB_STORE_URL at it and runs the migration recipe's life cycle: create, running,
succeeded/failed, a refused transition, an optimistic-concurrency conflict, a
newest-first page per owner, and a second store instance (a "replica") reading it all.
"""

from __future__ import annotations

import asyncio
import os

from platform_common.jobs import IllegalTransition, JobStatus, VersionConflict, make_job_store
from platform_common.jobs.testing import RedisServer


async def run() -> None:
    store = make_job_store()  # reads JOB_STORE_URL, as an agent would
    replica = make_job_store()
    await store.ping()
    print(f"store: {store!r}")
    for n in range(5):
        owner = "alice" if n % 2 == 0 else ""
        await store.create(f"scan-{n}", {"request": {"repo": f"repo-{n}"}}, ttl_seconds=600,
                           owner_oid=owner)  # fmt: skip
    await store.update("scan-0", status=JobStatus.RUNNING)
    done = await store.update("scan-0", status=JobStatus.SUCCEEDED, result={"findings": 2})
    await store.update("scan-1", status=JobStatus.FAILED, error="repository not found")
    print(f"scan-0: {done.status} v{done.version} result={done.result}")
    try:
        await store.update("scan-0", status=JobStatus.RUNNING)
    except IllegalTransition as exc:
        print(f"refused: {exc}")
    try:
        await store.update("scan-2", status=JobStatus.RUNNING, expected_version=7)
    except VersionConflict as exc:
        print(f"refused: {exc}")
    seen = await replica.get("scan-1")
    assert seen is not None
    print(f"replica sees scan-1: {seen.status} error={seen.error!r}")
    print(f"job ids: {sorted(await replica.list_ids())}")
    page = await replica.list_for_owner("alice", limit=3)
    print(f"alice's newest 3 (own + shared): {[r.job_id for r in page.rows]}")
    if page.next_cursor:
        rest = await replica.list_for_owner("alice", limit=3, cursor=page.next_cursor)
        print(f"next page: {[r.job_id for r in rest.rows]}")
    await replica.close()
    await store.close()


def main() -> None:
    with RedisServer() as server:
        os.environ["JOB_STORE_URL"] = server.url
        os.environ.setdefault("OTEL_SERVICE_NAME", "demo-agent")
        os.environ.setdefault("JOBSTATE_TIME_INDEX_ENABLED", "true")
        print(f"redis-server started on port {server.port}")
        asyncio.run(run())
    print("demo finished; redis-server stopped")


if __name__ == "__main__":
    main()
