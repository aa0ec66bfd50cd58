"""A queue console in the browser: queues, jobs and dead letters, server-rendered.

    from platform_common.jobs.console import console_router

    app.include_router(
        console_router(queue, auth_dependency=require_operator, read_only=False),
        prefix="/console",
    )

Needs the `console` extra (fastapi, jinja2). `agentjobs console` serves it standalone.
"""

from __future__ import annotations

from .links import ConsoleLinks
from .prometheus_history import PrometheusSource
from .router import console_router

__all__ = ["ConsoleLinks", "PrometheusSource", "console_router"]
