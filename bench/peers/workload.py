"""The workload every peer runs: payloads, the no-op handler's drain clock, the CLI and output.

Standard library only: it is imported by the peer scripts in the peers venv
(bench/.venv-peers) and by run.py in the main venv.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

PHASES = ("single", "bulk", "drain")
DEFAULT_CONCURRENCY = 10


def make_payload(index: int) -> dict[str, Any]:
    """One job shaped like the seed's job payload: the same fields and, as compact JSON,
    the same size (445 bytes) as bench/queue_throughput.py's make_jobs, which feeds our queue."""
    return {
        "job_id": str(uuid.uuid4()),
        "session_id": "5f0c6a4e-bench-session",
        "orchestrator_id": "orch-bench",
        "agent_type": "dining",
        "task": "Find 3 dinner reservations in Tokyo for Feb 13-17, party of 2",
        "constraints": {"cuisines": ["sushi", "kaiseki"], "max_price_per_person": 200},
        "curated_shortlist": ["sukiyabashi-jiro", "den", "kyubey"],
        "result_format": "RestaurantOption[]",
        "created_at": f"2026-01-15T10:30:00.{index % 1_000_000:06d}+00:00",
        "ttl_seconds": 3600,
    }


def make_payloads(n: int) -> list[dict[str, Any]]:
    # Built before any timer starts, so uuid and dict building are not counted.
    return [make_payload(i) for i in range(n)]


def payload_bytes() -> int:
    return len(json.dumps(make_payload(0), separators=(",", ":")).encode())


class DrainClock:
    """Counts handler calls and distinct jobs; knows when the n-th distinct job ran.

    The drain rate is n / (time the last distinct job ran - worker start), taken
    inside the worker process, so burst-mode idle tails (a final dequeue timeout,
    a poll sleep) and interpreter start-up are not counted, while the library's
    own worker start-up (connections, registration) is. Jobs are told apart by the
    payload's job_id, so a job a library runs twice is counted once and reported.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # dramatiq calls the handler from several threads
        self.expected = 0
        self.calls = 0
        self.seen: set[str] = set()
        self.started = 0.0
        self.finished = 0.0
        self.done = threading.Event()

    def start(self, expected: int) -> None:
        self.expected = expected
        self.calls = 0
        self.seen.clear()
        self.done.clear()
        self.started = time.perf_counter()

    def tick(self, payload: dict[str, Any]) -> None:
        with self._lock:
            self.calls += 1
            self.seen.add(payload["job_id"])
            if len(self.seen) == self.expected and not self.done.is_set():
                self.finished = time.perf_counter()
                self.done.set()

    def rate(self) -> float:
        if not self.done.is_set():
            raise RuntimeError(f"drain ran {len(self.seen)} of {self.expected} jobs")
        return self.expected / (self.finished - self.started)

    def result(self) -> dict[str, object]:
        """The drain fields every peer emits."""
        return {"rate": self.rate(), "ran": len(self.seen), "calls": self.calls}


CLOCK = DrainClock()


def noop(payload: dict[str, Any]) -> None:
    """The job for synchronous libraries (rq); it lives here so rq can import it by name."""
    CLOCK.tick(payload)


def timed(n: int, action: Callable[[], object]) -> float:
    """Jobs per second of one synchronous enqueue phase."""
    started = time.perf_counter()
    action()
    return n / (time.perf_counter() - started)


def parse_args(
    description: str, extra: Callable[[argparse.ArgumentParser], object] | None = None
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("--url", required=True, help="redis:// URL of the benchmark server")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def emit(**fields: object) -> None:
    """The last stdout line of a peer process is its result, read by run.py."""
    try:
        redis_py = version("redis")  # peers and ours may use different client releases
    except PackageNotFoundError:
        redis_py = "?"
    print(json.dumps({"redis_py": redis_py, **fields}), flush=True)
