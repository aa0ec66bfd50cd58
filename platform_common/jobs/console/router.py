"""The console's FastAPI router: the overview, one agent type, one job, the dead
letters and the failed jobs, server-rendered, read through the operations layer (the
one under the CLI).

    GET  /?window=hour|day              every agent type, its chart over the last hour or
                                        day (refreshes itself)
    GET  /types/{type}?list=&cursor=    its waiting, running, delayed, dead or failed
                                        jobs, paged
    GET  /types/{type}/jobs/{job_id}    one job: state, attempts, payload, result
    GET  /types/{type}/dead?error=&start=   dead letters, filtered by error text
    POST /types/{type}/dead/confirm     what a requeue or purge would do: a confirmation
    POST /types/{type}/dead/act         do it; the page says how many were really done
    GET, POST /types/{type}/failed...   the same three for the failed jobs
    POST /types/{type}/pause            pause or resume the agent type (no confirmation)
    POST /types/{type}/cancel/{job}     cancel one job (no confirmation)
    GET  /static/console.css

Unknown agent types and jobs are 404, bad input (a query or a form) 400, a waiting job
whose packed header was damaged 500 (a payload, history or result that does not parse is
shown on the job's page as stored), an unreachable Redis 503: each an HTML page of the
console with its security headers. A POST without a valid CSRF token is 403, and so is every POST of
a read-only console and every POST whose Origin header names another site.
"""

# No `from __future__ import annotations`: FastAPI reads these annotations at runtime.

import functools
import itertools
import re
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from redis.exceptions import NoPermissionError

from ..errors import (
    BackendUnavailable,
    CorruptQueueState,
    InvalidJobId,
    JobNotFound,
    ValidationError,
)
from ..operations import (
    MAX_PAGE_SIZE,
    CounterHistory,
    JobList,
    KeptList,
    agent_types,
    list_dead_letters,
    list_jobs,
    read_overview,
    read_workers,
    show_job,
)
from ..operations.job_search import find_job
from ..operations.overview import heartbeat_window
from ..operations.recorded_history import HistoryReader
from ..operations.session import redis_now
from ..queue import JobQueue, Limits
from ..queue.limits import FairWaits
from .cancel_forms import CancelForms
from .csrf import SESSION_COOKIE, CsrfTokens, foreign_origin, queue_identity
from .dead_forms import MAX_FILTER, DeadLetterForms
from .forms import ConsoleError
from .links import ConsoleLinks
from .pause_forms import PauseForms
from .prometheus_history import PrometheusSource
from .recorded_chart import ChartWindow, overview_chart
from .rendering import chart_bars, environment, path_segment

__all__ = ["console_router"]

_SECURITY_HEADERS = {
    # The pages run no script; styles come from the console's own stylesheet.
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_MAX_JOB_ID = 200
_POSITION = re.compile(r"[0-9]{1,16}")
"""A page's cursor or start: a list position. 16 digits pass any list Redis can hold and
stay below the 64-bit integers Redis takes (a bigger LRANGE index is a Redis error)."""
MAX_WORKERS_SHOWN = 500
"""Rows of the workers page: a larger fleet is cut, with a note (`agentjobs workers` lists
them all)."""
_ROUTERS = itertools.count(1)
"""Numbers each console_router's route names: two mounts in one app never share one."""


_Handler = Callable[..., Awaitable[Response]]


class _IncludedTwice(Exception):
    """One router included at two paths: its routes' names cannot tell them apart."""


def console_router(
    queue: JobQueue,
    *,
    auth_dependency: Callable[..., Any],
    read_only: bool = False,
    secret: bytes | None = None,
    links: ConsoleLinks | None = None,
    prometheus: PrometheusSource | None = None,
    page_size: int = 20,
    refresh_seconds: int = 10,
) -> APIRouter:
    """A router over `queue` behind the host app's `auth_dependency` (run for every page
    and form). `read_only` hides every change and refuses it (403). `secret` signs the
    CSRF tokens (default: random per process; pass one shared by every replica).
    `links` adds the runbook and Grafana links. `prometheus` fills the overview's chart
    (the last hour or day) from the exporter's counters there (else: from the history
    the workers record in Redis, and for a type without one the minutes the console read).

    Call it once for each mount (each include_router): a page's links, forms and session
    cookie belong to its own mount (its route names are its own, so `url_for` finds this
    mount's routes), and a form token of one mount is refused by another."""
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError(f"page_size must be 1 to {MAX_PAGE_SIZE}, got {page_size}")
    if refresh_seconds < 1:
        raise ValueError(f"refresh_seconds must be at least 1, got {refresh_seconds}")
    number = next(_ROUTERS)

    def named(route: str) -> str:
        return f"{route}:{number}"

    def mount_root(request: Request) -> str:
        """This mount's root path as the client sees it (the app's root_path included)."""
        root = request.url_for(named("console_overview")).path
        if not request.url.path.startswith(root):
            raise _IncludedTwice(
                f"this console router answers {request.url.path!r} but its routes resolve "
                f"under {root!r}: it is included at more than one path; call "
                "console_router once for each mount"
            )
        return root

    tokens = CsrfTokens(secret, queue_identity(queue.settings), mount_root)
    env = environment()
    history = CounterHistory()
    recorded = HistoryReader()
    links = links or ConsoleLinks()
    unreadable: set[str] = set()
    """Types Redis has seen that the console's Redis user may not read (the last
    overview's finding): left out of the navigation."""
    router = APIRouter(dependencies=[Depends(auth_dependency)], include_in_schema=False)

    def render(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        session = request.cookies.get(SESSION_COOKIE)
        fresh = not tokens.is_session(session)
        if fresh:
            session = tokens.new_session()
        assert session is not None

        def url(name: str, query: dict[str, Any] | None = None, **path: str) -> str:
            href = request.url_for(named(name), **path).path
            shown = {k: v for k, v in (query or {}).items() if v not in (None, "")}
            return f"{href}?{urlencode(shown)}" if shown else href

        html = env.get_template(template).render(
            url=url, csrf=tokens.token(request, session), read_only=read_only, links=links,
            agent_types=(
                *queue.settings.agent_types, *sorted(queue.connection.seen_types - unreadable)
            ),
            **context,
        )  # fmt: skip
        response = HTMLResponse(html, status, headers=_SECURITY_HEADERS)
        if fresh:
            response.set_cookie(
                SESSION_COOKIE, session, path=mount_root(request), httponly=True,
                samesite="strict", secure=request.url.scheme == "https",
            )  # fmt: skip
        return response

    def page_route(handler: _Handler) -> _Handler:
        """`handler` as a route: its page, or the error page its failure calls for (FastAPI
        reads the parameters of `handler` itself, through functools.wraps)."""

        @functools.wraps(handler)
        async def route(request: Request, **params: Any) -> Response:
            try:
                mount_root(request)
            except _IncludedTwice as exc:
                # No page: its links and cookie would belong to the other path.
                return PlainTextResponse(str(exc), 500, headers=_SECURITY_HEADERS)
            try:
                return await handler(request, **params)
            except ConsoleError as exc:
                status, problem = exc.status, exc.problem
            except JobNotFound as exc:
                status, problem = (
                    404,
                    f"no job {exc.job_id!r} (never enqueued, or gone with its TTL)",
                )
            except ValidationError as exc:
                status, problem = 400, str(exc)
            except BackendUnavailable as exc:
                status, problem = 503, f"Redis is unavailable: {exc}"
            except CorruptQueueState as exc:
                # A packed waiting job whose header was damaged by hand (a payload or a
                # history that does not parse is shown on the job's page, as stored).
                status = 500
                problem = f"a stored record of the queue does not parse ({exc}); the lists "
                problem += "of its agent type still show it, and a dead letter can be purged there"
            except NoPermissionError as exc:
                # The console's Redis user lacks a right (a read-only `reader` user behind a
                # read-write console): Redis refused before writing anything.
                status, problem = 403, f"Redis refused the console's user: {exc}"
            return render(request, "error.html", status, code=status, problem=problem)

        return route

    async def known(agent_type: str) -> str:
        """A configured agent type, or one Redis has seen (else a 404 page)."""
        try:
            await queue.connection.seen_keys(agent_type)
        except ValidationError:
            raise ConsoleError(404, f"unknown agent type {agent_type!r}") from None
        return agent_type

    forms = DeadLetterForms(queue, tokens, read_only, known)
    pauses = PauseForms(queue, tokens, read_only, known)
    cancels = CancelForms(queue, tokens, read_only, known)

    def same_origin(request: Request) -> None:
        """A form posted by a page of another site is refused, whatever it carries."""
        origin = foreign_origin(request)
        if origin is not None:
            raise ConsoleError(403, f"the form was posted from another site ({origin}): refused")

    def position(name: str, raw: str | None) -> int | None:
        """A cursor or start from the query: None when absent, else a list position."""
        if raw is None or raw == "":
            return None
        if not _POSITION.fullmatch(raw):
            raise ConsoleError(400, f"{name}: a list position of 1 to 16 digits, got {raw!r}")
        return int(raw)

    @router.get("/", name=named("console_overview"))
    @page_route
    async def overview(request: Request, window: str = ChartWindow.HOUR) -> Response:
        if window not in set(ChartWindow):
            choices = ", ".join(ChartWindow)
            raise ConsoleError(400, f"window: one of {choices}, got {window!r}")
        listed = await agent_types(queue)
        unreadable.clear()
        unreadable.update(listed.unreadable)
        read = await read_overview(queue, listed.names)
        # Readings continue while another source answers: they are the last fallback.
        readings = history.add(read)
        chart = await overview_chart(
            queue, recorded, prometheus, read, readings, ChartWindow(window)
        )
        minutes = chart.minutes
        charts = {t: chart_bars(m) for t, m in minutes.items()}
        totals = {
            t: (sum(x.completed for x in m), sum(x.failed for x in m), sum(x.covered for x in m))
            for t, m in minutes.items()
        }
        return render(
            request, "overview.html", overview=read, charts=charts, totals=totals,
            chart=chart, prometheus=prometheus, refresh_seconds=refresh_seconds,
            left_out=listed.notes(), window=ChartWindow(window), windows=list(ChartWindow),
        )  # fmt: skip

    @router.get("/types/{agent_type}", name=named("console_agent_type"))
    @page_route
    async def agent_type_page(
        request: Request,
        agent_type: str,
        list_: Annotated[str, Query(alias="list")] = JobList.WAITING,
        cursor: str | None = None,
    ) -> Response:
        # The query is read here, not by FastAPI's validation, so a bad one is a page of
        # the console (400) rather than a JSON reply that echoes the input.
        if list_ not in set(JobList):
            choices = ", ".join(JobList)
            raise ConsoleError(400, f"list: one of {choices}, got {list_!r}")
        at = position("cursor", cursor)
        page = await list_jobs(
            queue, await known(agent_type), JobList(list_), cursor=at, limit=page_size
        )
        stats = await queue.stats(agent_type)
        pause = await queue.pause_state(agent_type)
        limits: Limits | str
        waits: FairWaits | str | None = None
        weights: dict[str, int] = {}
        try:
            limits = await queue.limits(agent_type)
            weights = await queue.key_weights(agent_type)
        except CorruptQueueState as exc:  # shown on the page: the claim refuses it too
            limits = str(exc)
        try:  # fair share: which keys have gone longest without a start
            waits = await queue.fair_waits(agent_type)
        except CorruptQueueState as exc:
            waits = str(exc)
        counts = {
            JobList.WAITING: stats.queued, JobList.RUNNING: stats.in_progress,
            JobList.DELAYED: stats.delayed, JobList.DEAD: stats.dead,
            JobList.FAILED: await queue.failed_jobs.count(agent_type),
        }  # fmt: skip
        return render(
            request, "agent_type.html", agent_type=agent_type, page=page,
            counts=counts, lists=list(JobList), first_page=at is None, pause=pause,
            limits=limits, waits=waits, weights=weights,
        )  # fmt: skip

    # `:path`: a job id may hold "/" (links send it as %2F, which arrives decoded).
    @router.get("/types/{agent_type}/jobs/{job_id:path}", name=named("console_job"))
    @page_route
    async def job_page(request: Request, agent_type: str, job_id: str) -> Response:
        if not job_id or len(job_id) > _MAX_JOB_ID:
            raise ConsoleError(404, "no such job")
        detail = await show_job(queue, await known(agent_type), job_id)
        now = await redis_now(queue)
        return render(request, "job.html", agent_type=agent_type, job=detail, now=now)

    def kept_routes(kept: KeptList) -> None:
        """The list page, confirmation and action of one kept list, at /types/{type}/<list>
        (route names console_<list>, console_<list>_confirm, console_<list>_act)."""

        @router.get(f"/types/{{agent_type}}/{kept}", name=named(f"console_{kept}"))
        @page_route
        async def kept_page(
            request: Request,
            agent_type: str,
            error: str = "",
            start: str | None = None,
        ) -> Response:
            if len(error) > MAX_FILTER:
                raise ConsoleError(400, f"error: a filter is at most {MAX_FILTER} characters")
            first = position("start", start) or 0
            listing = await list_dead_letters(
                queue, await known(agent_type), limit=page_size,
                error_matches=forms.pattern(error), start=first, kept=kept,
            )  # fmt: skip
            # A filtered page stops after MAX_SCAN entries (bounded however rare the
            # match): "Older" then continues the search, even from an empty page.
            return render(
                request, "dead.html", agent_type=agent_type, kept=kept, listing=listing,
                error=error, start=first, next_start=listing.next_start,
                listing_now=await redis_now(queue),
            )  # fmt: skip

        @router.post(f"/types/{{agent_type}}/{kept}/confirm", name=named(f"console_{kept}_confirm"))
        @page_route
        async def kept_confirm(request: Request, agent_type: str) -> Response:
            same_origin(request)
            confirmation = await forms.confirm(request, agent_type, kept)
            return render(request, "confirm.html", agent_type=agent_type, c=confirmation)

        @router.post(f"/types/{{agent_type}}/{kept}/act", name=named(f"console_{kept}_act"))
        @page_route
        async def kept_act(request: Request, agent_type: str) -> Response:
            same_origin(request)
            report = await forms.act(request, agent_type, kept)
            return render(request, "done.html", agent_type=agent_type, report=report)

    for kept in KeptList:
        kept_routes(kept)

    @router.post("/types/{agent_type}/pause", name=named("console_pause"))
    @page_route
    async def pause_action(request: Request, agent_type: str) -> Response:
        same_origin(request)
        state = await pauses.act(request, agent_type)
        now = await redis_now(queue)
        return render(request, "paused.html", agent_type=agent_type, state=state, now=now)

    @router.get("/search", name=named("console_search"))
    @page_route
    async def search(
        request: Request,
        job_id: Annotated[str, Query(alias="id")] = "",
        agent_type: Annotated[str, Query(alias="type")] = "",
    ) -> Response:
        if not job_id:
            raise ConsoleError(400, "id: give the id of the job to find")
        if agent_type:
            searched: tuple[str, ...] = (await known(agent_type),)
        else:
            searched = (await agent_types(queue)).names
        try:
            found = await find_job(queue, searched, job_id)
        except InvalidJobId as exc:
            # At most 80 characters of it back: a 10 kB "id" makes no 10 kB page.
            shown = repr(job_id[:80]) + ("..." if len(job_id) > 80 else "")
            raise ConsoleError(404, f"no such job: {shown} is no job id ({exc})") from None
        if len(found) == 1:
            page = request.url_for(
                named("console_job"), agent_type=found[0], job_id=path_segment(job_id)
            )
            return RedirectResponse(page.path, 303, headers=_SECURITY_HEADERS)
        return render(
            request, "search.html", 200 if found else 404, job_id=job_id, found=found,
            searched=searched, searched_type=agent_type,
        )  # fmt: skip

    @router.get("/workers", name=named("console_workers"))
    @page_route
    async def workers_page(request: Request) -> Response:
        listed = await agent_types(queue)
        report = await read_workers(queue, listed.names)
        return render(
            request, "workers.html", report=report,
            workers=report.workers[:MAX_WORKERS_SHOWN], cap=MAX_WORKERS_SHOWN,
            window=heartbeat_window(queue.settings), left_out=listed.notes(),
            unclaimed={t: n for t, n in report.unclaimed.items() if n},
        )  # fmt: skip

    @router.post("/types/{agent_type}/cancel/{job_id:path}", name=named("console_cancel"))
    @page_route
    async def cancel_action(request: Request, agent_type: str, job_id: str) -> Response:
        same_origin(request)
        if not job_id or len(job_id) > _MAX_JOB_ID:
            raise ConsoleError(404, "no such job")
        report = await cancels.act(request, agent_type, job_id)
        return render(request, "cancelled.html", agent_type=agent_type, report=report)

    stylesheet = resources.files(__package__).joinpath("static/console.css").read_text()

    @router.get("/static/console.css", name=named("console_static"))
    async def console_css() -> Response:
        return Response(
            stylesheet, media_type="text/css",
            headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
        )  # fmt: skip

    return router
