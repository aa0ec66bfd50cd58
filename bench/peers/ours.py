"""Our queue's side of the peers benchmark: bench/queue_throughput.py's run_ours() and run_raw().

INTEGRATION POINT: bench/queue_throughput.py belongs to the queue's author; this module only
calls run_ours(redis_url, n, concurrency) -> {enqueue_per_s, enqueue_many_per_s,
drain_per_s, concurrency} and run_raw(redis_url, n) -> {lpush_per_s, brpop_per_s,
...} and maps them onto the peers table. If those names change, adapt here.
Runs with the main venv's python.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import workload

ROOT = Path(__file__).resolve().parents[2]
QUEUE_BENCH = ROOT / "bench" / "queue.py"


def our_version() -> str:
    try:
        release = version("platform-common-jobs")
    except PackageNotFoundError:
        release = "?"
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{release} ({commit or 'no git'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=workload.DEFAULT_CONCURRENCY)
    parser.add_argument("--raw", action="store_true", help="also run the raw redis-py loops")
    args = parser.parse_args()
    info: dict[str, object] = {"library": "ours", "version": our_version()}
    if not QUEUE_BENCH.exists():
        workload.emit(**info, missing="bench/queue_throughput.py does not exist yet")
        return
    # bench is a package of the project root; this script runs from bench/peers/.
    sys.path.insert(0, str(ROOT))
    try:
        from bench.queue_throughput import make_jobs, run_ours, run_raw
    except ImportError as exc:
        workload.emit(**info, missing=f"bench/queue_throughput.py: {exc}")
        return

    ours: dict[str, Any] = run_ours(args.url, args.n, concurrency=args.concurrency)
    raw: dict[str, Any] = run_raw(args.url, args.n) if args.raw else {}
    sample = json.dumps(make_jobs(1)[0], separators=(",", ":"))
    workload.emit(
        **info,
        single=ours["enqueue_per_s"],
        bulk=ours["enqueue_many_per_s"],
        drain=ours["drain_per_s"],
        concurrency=f"asyncio, --concurrency {int(ours['concurrency'])}",
        payload_bytes=len(sample.encode()),
        raw=raw,
    )


if __name__ == "__main__":
    main()
