"""A FastAPI router agents mount to let callers list and read their own jobs.

    from platform_common.jobs.store.http import jobs_router

    def current_owner(request: Request) -> str:      # the app decides who is asking
        return request.state.user_oid

    app.include_router(jobs_router(job_store, current_owner), prefix="/api")

GET /jobs?limit=&cursor=&include_payload=   newest first: the caller's jobs and shared ones
GET /jobs/{job_id}                          one job, if the caller may see it

A caller never sees another owner's jobs: `GET /jobs/{id}` of one is 404, exactly as
for a job that does not exist, so the API does not leak which ids exist. A bad
`limit` is 422, a malformed or foreign cursor 400, an unreachable backend 503.
"""

# No `from __future__ import annotations`: FastAPI reads these annotations at runtime,
# and they refer to the caller's dependency, a local of jobs_router().

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query

from ..errors import BackendBusy, BackendUnavailable, InvalidCursor, InvalidJobId, ValidationError
from ..validation import validate_owner_oid
from .contract import MAX_PAGE_LIMIT, JobStore

__all__ = ["jobs_router"]


def jobs_router(
    store: JobStore,
    owner: Callable[..., Any],
    *,
    default_limit: int = 20,
    max_limit: int = 100,
    tags: list[str] | None = None,
) -> APIRouter:
    """A router over `store`; `owner` is a FastAPI dependency returning the caller's
    owner id ("" for a caller who may see only shared jobs)."""
    if not 1 <= default_limit <= max_limit <= MAX_PAGE_LIMIT:
        raise ValueError(f"need 1 <= default_limit <= max_limit <= {MAX_PAGE_LIMIT}")
    router = APIRouter(tags=list(tags or ["jobs"]))

    async def caller(owner_oid: Annotated[Any, Depends(owner)]) -> str:
        try:
            return validate_owner_oid(owner_oid)
        except ValidationError:
            raise HTTPException(403, "the caller's owner id is not valid") from None

    @router.get("/jobs")
    async def list_jobs(
        owner_oid: Annotated[str, Depends(caller)],
        limit: Annotated[int, Query(ge=1, le=max_limit)] = default_limit,
        cursor: Annotated[str | None, Query(max_length=400)] = None,
        include_payload: bool = False,
    ) -> dict[str, Any]:
        try:
            page = await store.list_for_owner(
                owner_oid, limit=limit, cursor=cursor, include_payload=include_payload
            )
        except InvalidCursor as exc:
            raise HTTPException(400, f"invalid cursor: {exc.problem}") from None
        except BackendUnavailable as exc:
            raise _unavailable(exc) from None
        return {"jobs": [r.to_dict() for r in page.rows], "next_cursor": page.next_cursor}

    @router.get("/jobs/{job_id}")
    async def get_job(job_id: str, owner_oid: Annotated[str, Depends(caller)]) -> dict[str, Any]:
        try:
            record = await store.get(job_id)
        except InvalidJobId:
            record = None
        except BackendUnavailable as exc:
            raise _unavailable(exc) from None
        if record is None or record.owner_oid not in (owner_oid, ""):
            raise HTTPException(404, "job not found")
        return record.to_dict()

    return router


def _unavailable(exc: BackendUnavailable) -> HTTPException:
    """503 either way; a busy pool says so and asks the client to come back soon."""
    if isinstance(exc, BackendBusy):
        return HTTPException(503, "job store busy", headers={"Retry-After": "1"})
    return HTTPException(503, "job store unavailable")
