"""`console`: the queue console served on its own (uvicorn), for a quick local look.

Bound to 127.0.0.1 and read-only unless told otherwise: it has no authentication of
its own (an agent's app mounts `console_router` behind its own instead). It answers only
to the Host names it was started for (DNS rebinding), and its socket is bound before
Redis is touched, so a --host it cannot serve is one line and exit 2."""

from __future__ import annotations

import asyncio
import errno
import importlib
import ipaddress
import socket
import sys
from typing import Annotated, Any

import typer

from ..operations import operator_queue
from .exits import EXIT_FAILURE, EXIT_USAGE, PROMETHEUS_URL_ENV, CliError, MissingExtra
from .info_command import MetricsNamespaceOption
from .operator_output import RedisUrlOption, help_text

__all__ = ["HELP", "console"]

_CONSOLE_MODULES = ("fastapi", "jinja2", "uvicorn")


def console(
    port: Annotated[
        int, typer.Option("--port", "-p", min=1, max=65535, help="Port to serve on.")
    ] = 8090,
    host: Annotated[
        str,
        typer.Option(
            "--host", help="Address to bind (anything but loopback is reachable by others)."
        ),
    ] = "127.0.0.1",
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="Another name it answers to as a request's Host, e.g. the one a proxy "
            "forwards (repeatable). Without it, only the --host address (and localhost "
            "on loopback or 0.0.0.0): another site's name resolved to it is refused (400).",
            show_default=False,
        ),
    ] = None,
    read_write: Annotated[
        bool,
        typer.Option(
            "--read-write", help="Offer requeue and purge of dead letters (default: read-only)."
        ),
    ] = False,
    runbook_url: Annotated[
        str | None,
        typer.Option(
            "--runbook-url",
            help="Base of the runbooks, e.g. http://queue-exporter:9808/runbooks/.",
            show_default=False,
        ),
    ] = None,
    grafana_url: Annotated[
        str | None,
        typer.Option(
            "--grafana-url",
            help="The queue dashboard, e.g. http://grafana:3000/d/queue-overview.",
            show_default=False,
        ),
    ] = None,
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            "--prometheus-url",
            envvar=PROMETHEUS_URL_ENV,
            help="The Prometheus scraping the exporter, e.g. http://prometheus:9090: the "
            "overview charts the last hour or day from it (else from the history the "
            "workers record in Redis).",
            show_default=False,
        ),
    ] = None,
    metrics_namespace: MetricsNamespaceOption = "",
    redis_url: RedisUrlOption = None,
) -> None:
    """Serve the queue console (overview, agent types, jobs, dead letters) until Ctrl-C.

    Read-only and on 127.0.0.1 by default; it has no login, so --read-write on another
    --host lets anyone who reaches the port requeue and purge dead letters."""
    for name in _CONSOLE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            raise MissingExtra("console", "console", name) from None
    from ..console import ConsoleLinks, PrometheusSource
    from ..console.hosts import served_hosts

    try:
        hosts = served_hosts(host, allowed_host or ())
        links = ConsoleLinks(runbooks=runbook_url, grafana_dashboard=grafana_url)
        prometheus = (
            None if prometheus_url is None else PrometheusSource(prometheus_url, metrics_namespace)
        )
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    listening = _bind(host, port)
    if read_write and not _loopback(host):
        print(
            f"warning: a read-write console without login on {host}: anyone who reaches "
            f"port {port} can requeue and purge dead letters",
            file=sys.stderr,
        )
    try:
        asyncio.run(_serve(listening, host, hosts, read_write, links, prometheus, redis_url))
    finally:
        listening.close()


HELP = help_text(console.__doc__)


async def _serve(
    listening: socket.socket,
    host: str,
    hosts: frozenset[str],
    read_write: bool,
    links: Any,
    prometheus: Any,
    redis_url: str | None,
) -> None:
    import uvicorn
    from fastapi import FastAPI

    from ..console import console_router
    from ..console.hosts import AllowedHosts

    port = listening.getsockname()[1]
    async with operator_queue(redis_url) as queue:
        app = FastAPI(title="agentjobs console", docs_url=None, redoc_url=None, openapi_url=None)
        app.include_router(
            console_router(
                queue,
                auth_dependency=_nobody,
                read_only=not read_write,
                links=links,
                prometheus=prometheus,
            )
        )
        mode = "read-write" if read_write else "read-only"
        url_host = f"[{host}]" if ":" in host else host
        print(
            f"console ({mode}): http://{url_host}:{port}/ "
            f"(answers to Host {', '.join(sorted(hosts))})",
            file=sys.stderr,
            flush=True,
        )
        config = uvicorn.Config(AllowedHosts(app, hosts), host=host, port=port, log_level="warning")
        await uvicorn.Server(config).serve(sockets=[listening])


def _bind(host: str, port: int) -> socket.socket:
    """host:port bound here, not by uvicorn, so that an address this machine cannot serve
    is one line and a documented exit (uvicorn logs it and exits 3)."""
    # As uvicorn binds: IPv6 for an address with a colon, else IPv4 (localhost: 127.0.0.1).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, family, socket.SOCK_STREAM
        )[0]
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CliError(
            f"--host {host!r}: not an IP address or a name this machine resolves ({reason})",
            EXIT_USAGE,
        ) from None
    listening = socket.socket(family, kind, proto)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
    except OSError as exc:
        listening.close()
        if exc.errno == errno.EADDRNOTAVAIL:
            raise CliError(
                f"--host {host!r}: not an address of this machine ({exc.strerror})", EXIT_USAGE
            ) from None
        raise CliError(
            f"cannot serve on {host} port {port}: {exc.strerror}", EXIT_FAILURE
        ) from None
    listening.set_inheritable(True)
    return listening


def _nobody() -> None:
    """The standalone console's authentication: none (it binds to loopback by default)."""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
