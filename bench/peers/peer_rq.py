"""rq's side of the peers benchmark: Queue.enqueue, enqueue_many on a pipeline, SimpleWorker."""

from __future__ import annotations

from importlib.metadata import version

import workload
from redis import Redis
from rq import Queue, SimpleWorker

QUEUE = "bench"


def main() -> None:
    args = workload.parse_args(__doc__ or "")
    redis = Redis.from_url(args.url)
    redis.ping()  # connect before any timer starts
    queue = Queue(QUEUE, connection=redis)
    info: dict[str, object] = {"library": "rq", "version": version("rq")}

    if args.phase == "single":
        payloads = workload.make_payloads(args.n)

        def one_by_one() -> None:
            for payload in payloads:
                queue.enqueue(workload.noop, payload)

        workload.emit(**info, rate=workload.timed(args.n, one_by_one))
    elif args.phase == "bulk":
        payloads = workload.make_payloads(args.n)

        def in_one_pipeline() -> None:
            # rq's documented bulk idiom: prepare_data + enqueue_many on a caller's pipeline.
            jobs = [Queue.prepare_data(workload.noop, (payload,)) for payload in payloads]
            with redis.pipeline() as pipe:
                queue.enqueue_many(jobs, pipeline=pipe)
                pipe.execute()

        workload.emit(**info, rate=workload.timed(args.n, in_one_pipeline), api="enqueue_many")
    else:
        # SimpleWorker runs jobs in its own process; the default Worker forks once per
        # job, which measures fork() rather than the queue. It has no concurrency knob.
        worker = SimpleWorker([queue], connection=redis)
        workload.CLOCK.start(args.n)
        # WARNING: rq otherwise logs two INFO lines per job to stderr.
        worker.work(burst=True, logging_level="WARNING")
        workload.emit(
            **info,
            **workload.CLOCK.result(),
            concurrency="SimpleWorker, 1 job at a time",
        )


if __name__ == "__main__":
    main()
