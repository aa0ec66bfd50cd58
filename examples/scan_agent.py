"""Moving a FastAPI scan agent's module-level job dicts to the JobStore, so that several
replicas serve the same jobs.

Run two of these against one Redis and a scan started on one is visible, and
finished, on the other:

    JOB_STORE_URL=redis://localhost:6379/0 OTEL_SERVICE_NAME=scan-agent \\
        uvicorn examples.scan_agent:app --port 8001

POST /scans {"target": "...", "fail": false} -> {"job_id": ...}; GET /scans/{job_id}.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import uuid4

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from platform_common.jobs import JobStatus, ValidationError, make_job_store

job_store = make_job_store()  # reads JOB_STORE_URL

# The recipe's create_task() result must be referenced somewhere, or the event loop
# may garbage-collect a running scan; this set is the only line the recipe lacks.
_running: set[asyncio.Task[None]] = set()


async def do_work(req: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(float(req.get("seconds", 0.05)))
    if req.get("fail"):
        raise RuntimeError(f"scan of {req.get('target')!r} failed")
    return {"target": req.get("target"), "findings": 3}


async def start_scan(req: dict[str, Any]) -> dict[str, str]:
    job_id = uuid4().hex
    await job_store.create(job_id, {"request": req}, ttl_seconds=3600)
    task = asyncio.create_task(_run(job_id, req))
    _running.add(task)
    task.add_done_callback(_running.discard)
    return {"job_id": job_id}


async def _run(job_id: str, req: dict[str, Any]) -> None:
    await job_store.update(job_id, status=JobStatus.RUNNING)
    try:
        result = await do_work(req)
        await job_store.update(job_id, status=JobStatus.SUCCEEDED, result=result)
    except Exception as e:
        await job_store.update(job_id, status=JobStatus.FAILED, error=str(e))


async def get_status(job_id: str) -> tuple[dict[str, Any], int]:
    record = await job_store.get(job_id)
    if record is None:
        return {"error": "not found"}, 404
    return record.to_dict(), 200


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    await job_store.ping()  # health check at startup: fail fast when Redis is unreachable
    yield
    await job_store.close()


app = FastAPI(title="scan agent (JobStore migration recipe)", lifespan=lifespan)


@app.exception_handler(ValidationError)
async def bad_input(_: Request, exc: ValidationError) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, status_code=400)


@app.post("/scans")
async def post_scan(req: dict[str, Any]) -> dict[str, str]:
    return await start_scan(req)


@app.get("/scans/{job_id}")
async def get_scan(job_id: str) -> JSONResponse:
    body, status_code = await get_status(job_id)
    return JSONResponse(body, status_code=status_code)
