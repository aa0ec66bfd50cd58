"""`worker`: run a queue worker; the one command that needs only the core install.

    python -m platform_common.jobs worker --agent-type dining --handler pkg.module:func \
        --concurrency 10
    (alias: python -m platform_common.jobs.worker ...)

The handler is an `async def` (run on the event loop) or a plain `def` (run in a pool
of --concurrency threads: blocking calls are fine there); its module is imported with
the working directory first on sys.path, under every name the worker is run by.
Settings come from QUEUE_* environment variables (QUEUE_REDIS_URL or REDIS_URL, see
QueueSettings.from_env) and the options below. SIGTERM or SIGINT stop it gracefully:
no new jobs, running ones finish within QUEUE_SHUTDOWN_TIMEOUT, the rest go back.
`--log-format json` logs one JSON object per line, with the same fields as the text
lines.
Deployments run workers without the `cli` extra, so the options are parsed with
argparse here, and the typer app only forwards to `run`: typer and rich with their
dependencies are six packages and 16 MB installed, and about 45 ms of imports at every
start (`python -X importtime -c "import typer, rich.console"`, 2-core dev machine).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import os
import signal
import sys
from collections.abc import Sequence

from redis.exceptions import AuthenticationError, RedisError, ResponseError

from ..errors import BackendUnavailable, ConfigurationError
from ..queue import QueueSettings
from ..queue.context import Handler
from ..queue.log_text import bounded
from ..worker import Worker
from ..worker.attempt_log import JsonFormatter
from .exits import EXIT_FAILURE, EXIT_OK, CliError, enable_debug

__all__ = ["SUMMARY", "load_handler", "parser", "run"]

SUMMARY = "Run a queue worker for one agent type (needs only the core install)."

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_FORMATS = ("text", "json")
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# Redis answered, and said no: a wrong password (AuthenticationError), NOPERM (a
# ResponseError subclass), or another error reply. Anything else never reached it.
_REFUSALS = (AuthenticationError, ResponseError)


def load_handler(spec: str) -> Handler:
    """Import "pkg.module:func"; ConfigurationError unless it is a function (async def,
    or a plain def, which the worker runs in a thread) or a callable object."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError("--handler", f"expected pkg.module:function, got {spec!r}")
    _import_from_working_directory()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError("--handler", f"cannot import {module_name!r}: {exc}") from None
    handler = getattr(module, attribute, None)
    if handler is None:
        raise ConfigurationError("--handler", f"{module_name!r} has no {attribute!r}")
    generator = inspect.isgeneratorfunction(handler) or inspect.isasyncgenfunction(handler)
    if not callable(handler) or inspect.isclass(handler) or generator:
        raise ConfigurationError(
            "--handler",
            f"{spec!r} must be a function (async def, or a plain def run in a thread), "
            f"got {type(handler).__name__}",
        )
    return handler  # type: ignore[no-any-return]


def _import_from_working_directory() -> None:
    """Put the working directory first on sys.path, as `python -m` does (and rq and
    Celery workers): the `agentjobs` console script would otherwise find a handler module
    under `python -m platform_common.jobs worker` and not under its own name.
    PYTHONSAFEPATH (or -P) opts out, as it does for `python -m`."""
    if sys.flags.safe_path:
        return
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def parser(prog: str) -> argparse.ArgumentParser:
    """The worker's options (the same under every name it is run by)."""
    parser = argparse.ArgumentParser(prog=prog, description=SUMMARY)
    parser.add_argument("--agent-type", required=True, help="the queue to work on")
    parser.add_argument(
        "--handler", required=True, help="pkg.module:function (async def, or def: in a thread)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=10, help="jobs run at once (threads for a sync handler)"
    )
    parser.add_argument("--redis-url", help="overrides QUEUE_REDIS_URL / REDIS_URL")
    parser.add_argument("--worker-id", help="defaults to host:pid:random")
    parser.add_argument("--log-level", default="INFO", help=f"{', '.join(_LEVELS)} (INFO)")
    parser.add_argument(
        "--log-format", default="text", help="text or json (one JSON object per line); text"
    )
    parser.add_argument("--debug", action="store_true", help="print the traceback of a failure too")
    return parser


def _log_level(name: str) -> int:
    if name.upper() not in _LEVELS:
        raise ConfigurationError(
            "--log-level", f"expected one of {', '.join(_LEVELS)}, got {name!r}"
        )
    return logging.getLevelNamesMapping()[name.upper()]


def _log_handler(log_format: str) -> logging.Handler:
    if log_format.lower() not in _FORMATS:
        raise ConfigurationError(
            "--log-format", f"expected one of {', '.join(_FORMATS)}, got {log_format!r}"
        )
    handler = logging.StreamHandler(sys.stderr)
    json_lines = log_format.lower() == "json"
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(_TEXT_FORMAT))
    return handler


def _redis_failure(exc: Exception, settings: QueueSettings) -> CliError:
    """The one line for a Redis the worker cannot work with: the cause's class, the
    redacted URL (naming the host, never the password), whether Redis was unreachable or
    refused (a wrong password, a user without rights on this agent type's keys), and the
    cause, cut short (a Sentinel error repeats whole client reprs)."""
    cause = exc.__cause__ if isinstance(exc, BackendUnavailable) else exc
    if cause is None:
        cause = exc
    verb = "refused the worker" if isinstance(cause, _REFUSALS) else "unreachable"
    detail = bounded(str(cause), 300)
    return CliError(
        f"Redis: {type(cause).__name__}: {settings.redis.redacted_url()} {verb}: {detail}",
        EXIT_FAILURE,
    )


async def _work(worker: Worker) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.stop)
    await worker.run()


def run(argv: Sequence[str], prog: str) -> int:
    """Parse `argv` and work until stopped; errors are raised for `exits.guarded`."""
    args = parser(prog).parse_args(argv)
    if args.debug:
        enable_debug()
    logging.basicConfig(level=_log_level(args.log_level), handlers=[_log_handler(args.log_format)])
    # --redis-url replaces QUEUE_REDIS_URL / REDIS_URL (errors then name --redis-url).
    settings = QueueSettings.from_env(redis_url=args.redis_url or None)
    worker = Worker(
        settings,
        args.agent_type,
        load_handler(args.handler),
        concurrency=args.concurrency,
        worker_id=args.worker_id,
    )
    try:
        asyncio.run(_work(worker))
    except (BackendUnavailable, RedisError, OSError) as exc:
        raise _redis_failure(exc, settings) from exc
    return EXIT_OK
