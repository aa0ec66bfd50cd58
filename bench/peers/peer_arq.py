"""arq's side of the peers benchmark: ArqRedis.enqueue_job and a burst-mode Worker."""

from __future__ import annotations

import argparse
import asyncio
from importlib.metadata import version
from typing import Any

import workload
from arq import Worker, create_pool
from arq.connections import RedisSettings
from arq.worker import func

# arq's own default. Its worker reads at most queue_read_limit (100) job ids per
# poll and then sleeps out the rest of poll_delay, so with no-op jobs the default
# caps a worker near 200 jobs/s; run.py also runs a short-poll variant to show
# what arq does when tuned.
DEFAULT_POLL_DELAY = 0.5


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poll-delay", type=float, default=DEFAULT_POLL_DELAY)


async def noop(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
    workload.CLOCK.tick(payload)


async def run(args: argparse.Namespace) -> None:
    settings = RedisSettings.from_dsn(args.url)
    info: dict[str, object] = {"library": "arq", "version": version("arq")}

    if args.phase == "single":
        redis = await create_pool(settings)
        await redis.ping()  # connect before the timer starts
        payloads = workload.make_payloads(args.n)
        loop = asyncio.get_running_loop()
        started = loop.time()
        for payload in payloads:
            await redis.enqueue_job("noop", payload)
        elapsed = loop.time() - started
        await redis.aclose()
        workload.emit(**info, rate=args.n / elapsed)
    elif args.phase == "bulk":
        # arq documents no bulk enqueue, and a bare gather over enqueue_job opens one
        # pool connection per pending job (its pool is unbounded): no honest number.
        workload.emit(**info, rate=None, api="n/a: none")
    else:
        worker = Worker(
            functions=[func(noop, name="noop")],
            redis_settings=settings,
            burst=True,
            max_jobs=args.concurrency,
            poll_delay=args.poll_delay,
            handle_signals=False,
        )
        workload.CLOCK.start(args.n)
        await worker.main()
        await worker.close()
        workload.emit(
            **info,
            **workload.CLOCK.result(),
            concurrency=f"asyncio, max_jobs={args.concurrency}, poll_delay={args.poll_delay:g}s",
        )


def main() -> None:
    asyncio.run(run(workload.parse_args(__doc__ or "", add_options)))


if __name__ == "__main__":
    main()
