"""dramatiq's side of the peers benchmark: Actor.send and one in-process Worker with threads."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import dramatiq
import workload
from dramatiq.brokers.redis import RedisBroker

# How long the drain may take before the run is called failed (seconds).
DRAIN_TIMEOUT = 600.0


def main() -> None:
    args = workload.parse_args(__doc__ or "")
    broker = RedisBroker(url=args.url)
    dramatiq.set_broker(broker)
    broker.client.ping()  # connect before any timer starts

    # Declared after set_broker so the actor binds to this run's server.
    @dramatiq.actor(actor_name="noop", queue_name="bench")
    def noop(payload: dict[str, Any]) -> None:
        workload.CLOCK.tick(payload)

    info: dict[str, object] = {"library": "dramatiq", "version": version("dramatiq")}

    if args.phase == "single":
        payloads = workload.make_payloads(args.n)

        def one_by_one() -> None:
            for payload in payloads:
                noop.send(payload)

        workload.emit(**info, rate=workload.timed(args.n, one_by_one))
    elif args.phase == "bulk":
        # group(...).run() is dramatiq's only many-messages API, and it calls
        # broker.enqueue once per message (no pipeline): not a bulk enqueue.
        workload.emit(**info, rate=None, api="n/a: group.run sends 1 by 1")
    else:
        # The Worker that `dramatiq --processes 1 --threads N` runs in its child
        # process, started here so the clock lives in the same process as the handler.
        worker = dramatiq.Worker(broker, worker_threads=args.concurrency)
        workload.CLOCK.start(args.n)
        worker.start()
        finished = workload.CLOCK.done.wait(DRAIN_TIMEOUT)
        worker.stop()
        if not finished:
            raise SystemExit(f"dramatiq drained {len(workload.CLOCK.seen)} of {args.n} jobs")
        workload.emit(
            **info,
            **workload.CLOCK.result(),
            concurrency=f"1 process, threads={args.concurrency}",
        )


if __name__ == "__main__":
    main()
