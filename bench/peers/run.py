"""Peers benchmark: one no-op workload on rq, arq, saq, dramatiq and our queue, one table.

Usage: .venv/bin/python bench/peers/run.py [--n 20000] [--concurrency 10] [--libs ...]

The peers live in bench/.venv-peers (created and filled from requirements.txt on
first run, never the main venv); each phase of each peer runs in its own process
with that venv's python. Ours runs with the main venv's python (bench/peers/ours.py
-> bench/queue_throughput.py:run_ours). Everything talks to one private redis-server started
here on a free port, flushed between libraries.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis
import workload

from tests.support.redis_server import RedisServer

PEERS_DIR = Path(__file__).resolve().parent
ROOT = PEERS_DIR.parents[1]
VENV = ROOT / "bench" / ".venv-peers"
REQUIREMENTS = PEERS_DIR / "requirements.txt"
# A copy of the requirements the venv was last filled from: a changed pin reinstalls.
STAMP = VENV / "installed-requirements.txt"
OURS = "ours"
# Not a queue: LPUSH one by one / BRPOP one by one on the same server, the floor
# under every row (from bench/queue_throughput.py's run_raw, asyncio client like ours).
RAW = "raw"


@dataclass(frozen=True)
class Peer:
    key: str  # the name --libs takes
    label: str
    script: str
    has_bulk: bool  # decides whether the single phase's jobs are flushed before bulk
    drain_args: tuple[str, ...] = ()


PEERS = (
    Peer("rq", "rq", "peer_rq.py", has_bulk=True),
    Peer("arq", "arq", "peer_arq.py", has_bulk=False),
    # arq's default poll_delay (0.5 s) caps a no-op drain near 200 jobs/s; this row
    # shows arq tuned, so the comparison is not only against a default.
    Peer("arq-tuned", "arq poll 0.01s", "peer_arq.py", False, ("--poll-delay", "0.01")),
    Peer("saq", "saq", "peer_saq.py", has_bulk=True),
    Peer("dramatiq", "dramatiq", "peer_dramatiq.py", has_bulk=False),
)
ALL_KEYS = (OURS, RAW, *(peer.key for peer in PEERS))


@dataclass
class Row:
    label: str
    version: str = "?"
    redis_py: str = "?"
    single: float | None = None
    bulk: float | None = None
    bulk_api: str = "n/a"
    drain: float | None = None
    concurrency: str = "?"
    problem: str = ""


class PhaseFailed(RuntimeError):
    pass


def ensure_peers_venv() -> Path:
    python = VENV / "bin" / "python"
    wanted = REQUIREMENTS.read_text()
    if python.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return python
    if not python.exists():
        print(f"creating {VENV.relative_to(ROOT)} ...", file=sys.stderr, flush=True)
        # The main venv's interpreter makes the peers venv: same CPython as ours.
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print("installing the peers from requirements.txt ...", file=sys.stderr, flush=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    STAMP.write_text(wanted)
    return python


def run_json(command: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run one benchmark process; its last JSON line on stdout is the result."""
    try:
        proc = subprocess.run(
            list(command), capture_output=True, text=True, timeout=timeout, cwd=PEERS_DIR
        )
    except subprocess.TimeoutExpired as exc:
        raise PhaseFailed(f"timed out after {timeout:.0f}s") from exc
    results = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not results:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PhaseFailed(f"exit {proc.returncode}: {tail}")
    result: dict[str, Any] = json.loads(results[-1])
    return result


def run_peer(
    peer: Peer, python: Path, client: redis.Redis, url: str, args: argparse.Namespace
) -> Row:
    row = Row(peer.label)

    def phase(name: str, extra: Sequence[str] = ()) -> dict[str, Any]:
        common = ["--url", url, "--n", str(args.n), "--concurrency", str(args.concurrency)]
        command = [str(python), str(PEERS_DIR / peer.script), name, *common, *extra]
        return run_json(command, args.timeout)

    try:
        client.flushall()
        single = phase("single")
        row.version, row.redis_py = single["version"], single["redis_py"]
        row.single = single["rate"]
        if peer.has_bulk:
            client.flushall()  # the drain then sees exactly the n jobs of the bulk phase
        bulk = phase("bulk")
        row.bulk, row.bulk_api = bulk["rate"], bulk["api"]
        drain = phase("drain", peer.drain_args)
        row.drain, row.concurrency = drain["rate"], drain["concurrency"]
        if drain["ran"] != args.n:
            row.problem = f"drain ran {drain['ran']} distinct jobs, expected {args.n}"
        elif drain["calls"] != args.n:
            row.problem = f"{drain['calls'] - args.n} jobs ran twice (drain rate still counts n)"
    except PhaseFailed as exc:
        row.problem = str(exc)
    return row


def run_ours(client: redis.Redis, url: str, args: argparse.Namespace) -> list[Row]:
    """Our row, and the raw redis-py reference row when asked for."""
    row = Row(OURS)
    client.flushall()
    command = [sys.executable, str(PEERS_DIR / "ours.py"), "--url", url, "--n", str(args.n)]
    command += ["--concurrency", str(args.concurrency)]
    with_raw = RAW in args.libs
    if with_raw:
        command.append("--raw")
    try:
        result = run_json(command, args.timeout)
    except PhaseFailed as exc:
        row.problem = str(exc)
        return [row]
    row.version, row.redis_py = result["version"], result["redis_py"]
    if "missing" in result:
        row.problem = f"not measured: {result['missing']}"
        return [row]
    row.single, row.bulk, row.drain = result["single"], result["bulk"], result["drain"]
    row.bulk_api = "enqueue_many (pipelined)"
    row.concurrency = result["concurrency"]
    if result["payload_bytes"] != workload.payload_bytes():
        row.problem = f"payload {result['payload_bytes']} B, peers' {workload.payload_bytes()} B"
    if not with_raw:
        return [row]
    raw = result["raw"]
    reference = Row(
        RAW,
        version=f"redis-py {result['redis_py']}",
        redis_py=result["redis_py"],
        single=raw["lpush_per_s"],
        drain=raw["brpop_per_s"],
        bulk_api="-",
        concurrency="1 connection, asyncio, 1 by 1",
    )
    return [row, reference]


def fmt_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:,.0f}"


def fmt_ratio(ours: float | None, theirs: float | None) -> str:
    return "n/a" if ours is None or theirs is None else f"{ours / theirs:.2f}x"


def table(headers: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    columns = zip(headers, *lines, strict=True)
    widths = [max(len(cell) for cell in column) for column in columns]
    out = [" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    out.append("-+-".join("-" * w for w in widths))
    for line in lines:
        out.append(" | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    return "\n".join(out)


def report(rows: Sequence[Row], server_version: str, args: argparse.Namespace) -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    head = (
        f"N={args.n:,} no-op jobs, payload {workload.payload_bytes()} B JSON; "
        f"redis-server {server_version} (private, no persistence); "
        f"CPython {platform.python_version()}; {os.cpu_count()} cores, load avg {load}"
    )
    # Not one client for all: arq pins redis-py < 6 in the peers venv.
    ours_client = "/".join({r.redis_py for r in rows if r.label == OURS}) or "-"
    peers_client = "/".join({r.redis_py for r in rows if r.label not in (OURS, RAW)}) or "-"
    head += f"\nredis-py: ours {ours_client}, peers {peers_client}"
    lines = [
        [
            r.label,
            r.version,
            fmt_rate(r.single),
            fmt_rate(r.bulk),
            r.bulk_api,
            fmt_rate(r.drain),
            r.concurrency,
        ]
        for r in rows
    ]
    headers = ["library", "version", "enqueue/s", "bulk/s", "bulk API", "drain/s", "worker"]
    parts = [head, "", table(headers, lines)]
    ours = next((r for r in rows if r.label == OURS and not r.problem), None)
    peers = [r for r in rows if r.label not in (OURS, RAW)]
    if ours is not None and peers:
        ratio_lines = [
            [
                r.label,
                fmt_ratio(ours.single, r.single),
                fmt_ratio(ours.bulk, r.bulk),
                fmt_ratio(ours.drain, r.drain),
            ]
            for r in peers
        ]
        parts += ["", table(["ours / theirs", "enqueue", "bulk", "drain"], ratio_lines)]
    problems = [f"{r.label}: {r.problem}" for r in rows if r.problem]
    if problems:
        parts += ["", "notes:", *problems]
    parts += [
        "",
        "jobs/s, higher is better; one run on a shared 2-core machine: expect +-20% noise.",
    ]
    return "\n".join(parts)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000, help="jobs per phase")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=workload.DEFAULT_CONCURRENCY,
        help="arq max_jobs, saq concurrency, dramatiq threads (rq's SimpleWorker has none)",
    )
    parser.add_argument(
        "--libs", default=",".join(ALL_KEYS), help=f"comma-separated, from {','.join(ALL_KEYS)}"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per phase process")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    args.libs = [key.strip() for key in args.libs.split(",") if key.strip()]
    unknown = set(args.libs) - set(ALL_KEYS)
    if unknown:
        parser.error(f"unknown --libs {sorted(unknown)}; choose from {','.join(ALL_KEYS)}")
    if RAW in args.libs and OURS not in args.libs:
        parser.error("--libs raw comes from bench/queue_throughput.py with ours: add ours")
    return args


def main() -> None:
    args = parse_args()
    peers = [peer for peer in PEERS if peer.key in args.libs]
    python = ensure_peers_venv() if peers else Path(sys.executable)
    started = time.monotonic()
    rows: list[Row] = []
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        server_info: dict[str, Any] = client.info("server")  # type: ignore[assignment]
        server_version = str(server_info["redis_version"])
        if OURS in args.libs:
            print("running ours ...", file=sys.stderr, flush=True)
            rows.extend(run_ours(client, server.url, args))
        for peer in peers:
            print(f"running {peer.label} ...", file=sys.stderr, flush=True)
            rows.append(run_peer(peer, python, client, server.url, args))
        client.close()
    print(report(rows, server_version, args))
    print(f"(whole run {time.monotonic() - started:.0f}s)")
    if args.json:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=2) + "\n")


if __name__ == "__main__":
    main()
