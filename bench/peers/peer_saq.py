"""saq's side of the peers benchmark: Queue.enqueue, gathered enqueues, a burst-mode Worker."""

from __future__ import annotations

import argparse
import asyncio
from importlib.metadata import version
from typing import Any

import workload
from saq import Queue, Worker

QUEUE = "bench"
# In burst mode saq stops after a dequeue waits this long on an empty queue; the
# drain clock stops at the last job, so this tail is not counted.
DEQUEUE_TIMEOUT = 1.0


async def noop(ctx: dict[str, Any], *, payload: dict[str, Any]) -> None:
    workload.CLOCK.tick(payload)


async def run(args: argparse.Namespace) -> None:
    queue = Queue.from_url(args.url, name=QUEUE)
    await queue.connect()
    info: dict[str, object] = {"library": "saq", "version": version("saq")}
    loop = asyncio.get_running_loop()

    if args.phase in ("single", "bulk"):
        payloads = workload.make_payloads(args.n)
        started = loop.time()
        if args.phase == "single":
            for payload in payloads:
                await queue.enqueue("noop", payload=payload)
        else:
            # saq has no pipelined enqueue_many; Queue.map enqueues its jobs with
            # asyncio.gather (bounded by the queue's max_concurrent_ops, 20), so that
            # is saq's bulk idiom. map itself would also wait for results.
            await asyncio.gather(*(queue.enqueue("noop", payload=p) for p in payloads))
        elapsed = loop.time() - started
        api = "gather(enqueue), as map" if args.phase == "bulk" else "enqueue"
        await queue.disconnect()
        workload.emit(**info, rate=args.n / elapsed, api=api)
    else:
        worker = Worker(
            queue,
            functions=[noop],
            concurrency=args.concurrency,
            burst=True,
            dequeue_timeout=DEQUEUE_TIMEOUT,
        )
        workload.CLOCK.start(args.n)
        await worker.start()
        await queue.disconnect()
        workload.emit(
            **info,
            **workload.CLOCK.result(),
            concurrency=f"asyncio, concurrency={args.concurrency}",
        )


def main() -> None:
    asyncio.run(run(workload.parse_args(__doc__ or "")))


if __name__ == "__main__":
    main()
