"""The exporter's HTTP face: /metrics, /healthz, /readyz, /runbooks/ (FastAPI, one process)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .runbook_pages import runbook_router
from .service import Exporter
from .settings import ExporterSettings

__all__ = ["create_app"]

_INDEX = """<!doctype html><title>queue exporter</title><h1>Queue exporter</h1>
<ul><li><a href="metrics">/metrics</a></li><li><a href="healthz">/healthz</a></li>
<li><a href="readyz">/readyz</a></li><li><a href="runbooks/">/runbooks/</a></li></ul>"""


def create_app(settings: ExporterSettings) -> FastAPI:
    """The ASGI app; its Exporter is `app.state.exporter`, closed when the app shuts down."""
    exporter = Exporter(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            # Once at start (bounded by the Redis timeout): an evicting policy is said now,
            # not only at the first scrape.
            await exporter.check_memory_policy()
            yield
        finally:
            await exporter.aclose()

    app = FastAPI(title="queue exporter", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.exporter = exporter
    app.add_middleware(_HeadAsGet)
    # The alerts' runbook_url points here, so on-call reaches the page from the alert.
    app.include_router(runbook_router())

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        # Computed now, from one snapshot: Prometheus' scrape is the only trigger.
        result = await exporter.scrape()
        body, content_type = exporter.render(result, request.headers.get("accept"))
        return Response(content=body, headers={"Content-Type": content_type})

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        # Liveness: the process serves requests. Redis trouble must not restart the pod.
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        # Ready whenever it serves, Redis or not: a Redis outage is a metric and its own
        # alert, where dropping the exporter from its Service would page "exporter down".
        # The body says what Redis did, for a person with curl.
        redis = "reachable" if await exporter.ready() else "unreachable"
        return JSONResponse({"status": "ready", "redis": redis})

    @app.get("/", response_class=HTMLResponse)
    async def index() -> str:
        return _INDEX

    return app


class _HeadAsGet:
    """Answers HEAD on every GET route (uptime and link checkers send HEAD): the GET's
    headers, Content-Length included, without its body. FastAPI routes do not add HEAD,
    and declaring it per route gives both methods one OpenAPI operation id."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
