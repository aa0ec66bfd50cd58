"""Run a queue worker: `python -m platform_common.jobs.worker --agent-type dining
--handler pkg.module:func --concurrency 10`.

Settings come from QUEUE_* environment variables (QUEUE_REDIS_URL or REDIS_URL, see
QueueSettings.from_env) and the options below. SIGTERM or SIGINT stop it gracefully:
no new jobs, running ones finish within QUEUE_SHUTDOWN_TIMEOUT, the rest go back."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import signal
import sys
from collections.abc import Sequence

from .errors import ConfigurationError
from .queue import QueueSettings, Worker
from .queue.context import Handler

__all__ = ["load_handler", "main"]


def load_handler(spec: str) -> Handler:
    """Import "pkg.module:func"; ConfigurationError if it is not an async function."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError("--handler", f"expected pkg.module:function, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError("--handler", f"cannot import {module_name!r}: {exc}") from None
    handler = getattr(module, attribute, None)
    if handler is None:
        raise ConfigurationError("--handler", f"{module_name!r} has no {attribute!r}")
    if not inspect.iscoroutinefunction(handler):
        raise ConfigurationError("--handler", f"{spec!r} must be an async function")
    return handler  # type: ignore[no-any-return]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m platform_common.jobs.worker")
    parser.add_argument("--agent-type", required=True, help="the queue to work on")
    parser.add_argument("--handler", required=True, help="pkg.module:async_function")
    parser.add_argument("--concurrency", type=int, default=10, help="jobs run at once")
    parser.add_argument("--redis-url", help="overrides QUEUE_REDIS_URL / REDIS_URL")
    parser.add_argument("--worker-id", help="defaults to host:pid:random")
    parser.add_argument("--log-level", default="INFO")
    return parser


async def _run(worker: Worker) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.stop)
    await worker.run()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        settings = QueueSettings.from_env()
        if args.redis_url:
            settings = settings.with_overrides(redis=QueueSettings.from_url(args.redis_url).redis)
        handler = load_handler(args.handler)
        worker = Worker(
            settings,
            args.agent_type,
            handler,
            concurrency=args.concurrency,
            worker_id=args.worker_id,
        )
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_run(worker))
    return 0


if __name__ == "__main__":
    sys.exit(main())
