"""`make demo`: the whole alert loop on this machine. A private redis-server, workers, a
producer with poison jobs and a failing phase (one agent type's upstream down for a
while), the exporter, Prometheus with the generated rules (a demo copy with shorter
alert timings, demo/site.yaml), Alertmanager notifying a local webhook receiver that
prints each alert with its runbook link, and the runbook site. Ctrl-C (or --seconds, or
--until-alert) stops everything it started."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from platform_common.jobs import JobStatus, make_job_store
from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.queue import JobQueue, QueueSettings
from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.site import load_config

from .alerting import AlertTiming, DemoBundle, render_bundle
from .processes import DemoError, ProcessGroup, free_port, port_to_use
from .receiver import runbook_site, webhook_receiver
from .servers import (
    alertmanager_config,
    prometheus_config,
    start_alertmanager,
    start_exporter,
    start_prometheus,
    start_redis,
    start_workers,
)
from .traffic import TASKS, produce

AGENT_TYPES = tuple(TASKS)
WATCHED_ALERT = "DeadLetterDepthHigh"
SLO_ALERT = "JobAvailabilityBudgetBurnFast"
"""The page the failing phase burns the error budget fast enough for."""
PROMETHEUS_PORT, ALERTMANAGER_PORT, RUNBOOK_PORT = 9090, 9093, 8000


async def show_job_store(redis_url: str) -> None:
    """The JobStore as an agent uses it (the migration recipe's calls)."""
    os.environ["JOB_STORE_URL"] = redis_url
    os.environ.setdefault("OTEL_SERVICE_NAME", "demo-agent")
    store = make_job_store()
    try:
        job_id = uuid.uuid4().hex
        created = await store.create(job_id, {"request": "scan"}, ttl_seconds=3600)
        print(f"  created  {job_id}  status={created.status}  version={created.version}")
        running = await store.update(job_id, status=JobStatus.RUNNING)
        print(f"  updated  {job_id}  status={running.status}  version={running.version}")
        done = await store.update(job_id, status=JobStatus.SUCCEEDED, result={"findings": 3})
        print(f"  finished {job_id}  status={done.status}  result={done.result}")
        for _ in range(3):
            await store.create(uuid.uuid4().hex, {"request": "scan"}, ttl_seconds=600)
        print(f"  list_ids -> {len(await store.list_ids(limit=10))} jobs")
    finally:
        await store.close()


async def run_traffic(
    redis_url: str, args: argparse.Namespace, fired: threading.Event, timing: AlertTiming
) -> int:
    """Produce until Ctrl-C, --seconds, or (--until-alert) the watched alert's arrival."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    queue = await JobQueue.connect(QueueSettings.from_url(redis_url))
    try:
        until = fired if args.until_alert else None
        await produce(queue, AGENT_TYPES, args.seconds, args.rate, stop, until, timing.outage)
    finally:
        await queue.aclose()
    if args.until_alert and not fired.is_set() and not stop.is_set():
        print(f"{WATCHED_ALERT} did not arrive within {args.seconds:g}s", file=sys.stderr)
        return 1
    return 0


def agentjobs_info(redis_url: str) -> str:
    """The operator CLI's `info` command for the demo's Redis, as a user would type it."""
    script = Path(sys.executable).with_name("agentjobs")
    if script.exists():
        with contextlib.suppress(ValueError):
            script = script.relative_to(Path.cwd())
        command = str(script)
    else:
        command = f"{sys.executable} -m platform_common.jobs"
    return f"{command} info {' '.join(AGENT_TYPES)} --redis-url {redis_url}"


def banner(
    args: argparse.Namespace, urls: dict[str, str], bundle: DemoBundle, timing: AlertTiming
) -> str:
    config, shipped = bundle.config, load_config()
    mode = "--fast" if args.fast else "demo/site.yaml"
    until = "Ctrl-C stops everything." if args.seconds <= 0 else f"Stops after {args.seconds:g}s."
    return "\n".join([
        "",
        f"exporter:      {urls['exporter']}/metrics",
        f"prometheus:    {urls['prometheus']}/alerts   (rules: {bundle.rule_file})",
        f"alertmanager:  {urls['alertmanager']}/#/alerts -> webhook {urls['webhook']}"
        " (prints each alert below)",
        f"runbooks:      {urls['runbooks']}   (the generated runbooks/html/ of the demo's copy)",
        f"workers:       {args.workers} per agent type ({', '.join(AGENT_TYPES)}),"
        f" logs in {urls['logs']} (removed at exit)",
        f"try:           {urls['agentjobs']}",
        "producer:      ordinary, slow, flaky (retried) and poison (dead-lettered) jobs",
        f"{WATCHED_ALERT}, demo-only timing ({mode}): more than {config.dead_letter_high} dead"
        f" jobs of a type for {config.dead_letter_high_for}, rules evaluated every"
        f" {config.rule_interval}, scraped every {timing.scrape_interval} (shipped:"
        f" {shipped.dead_letter_high} for {shipped.dead_letter_high_for}, every"
        f" {shipped.rule_interval}).",
        *_slo_lines(config, timing),
        until,
        "",
    ])  # fmt: skip


def _slo_lines(config: MonitoringConfig, timing: AlertTiming) -> list[str]:
    """What the failing phase shows: the budget it burns and the page that follows."""
    outage = timing.outage
    objective = config.slo_objectives("availability").get(
        outage.agent_type, config.slo_availability
    )
    budget = objective.error_budget
    return [
        f"failing phase: {outage.seconds:g}s from {outage.start:g}s in, every"
        f" {outage.agent_type} job fails. Its availability objective is"
        f" {objective.target:g} (an error budget of {budget:.0%} of its jobs over"
        f" {objective.window}); {SLO_ALERT} pages once more than 14.4 x {budget:.0%} of the"
        " jobs that finished in both the last 5m and 1h failed (the SRE workbook's fast"
        " burn: the budget would be gone in two days).",
    ]


def run(args: argparse.Namespace) -> int:
    any_port: bool = args.free_ports
    timing = AlertTiming.for_mode(args.fast)
    fired = threading.Event()

    def on_alert(alert: dict[str, Any]) -> None:
        firing = alert.get("status") == "firing"
        if firing and alert.get("labels", {}).get("alertname") == WATCHED_ALERT:
            fired.set()

    with (
        tempfile.TemporaryDirectory(prefix="agentjobs-demo-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        run_dir = Path(tmp)
        redis_group = stack.enter_context(ProcessGroup(run_dir))  # stopped last
        redis_url = start_redis(redis_group, run_dir / "redis", free_port())  # never 6379
        print(f"redis-server at {redis_url} (deploy/redis/redis.conf: AOF everysec, noeviction)")
        print("JobStore:")
        asyncio.run(show_job_store(redis_url))

        bundle_root = run_dir / "bundle"
        urls = {"logs": str(run_dir), "agentjobs": agentjobs_info(redis_url)}
        urls["runbooks"] = stack.enter_context(
            runbook_site(bundle_root / "runbooks" / "html", 0 if any_port else RUNBOOK_PORT)
        )
        urls["webhook"] = stack.enter_context(webhook_receiver(0, on_alert))
        group = stack.enter_context(ProcessGroup(run_dir))
        stack.callback(_stopping)  # runs first: the children stop in order, uninterrupted
        exporter_port = port_to_use(args.port, any_port=any_port)
        urls["exporter"] = start_exporter(group, redis_url, exporter_port, AGENT_TYPES)
        start_workers(group, redis_url, AGENT_TYPES, args.workers)
        prometheus_port = port_to_use(PROMETHEUS_PORT, any_port=any_port)
        urls["prometheus"] = f"http://127.0.0.1:{prometheus_port}"
        site_urls = {
            "exporter_url": urls["exporter"],
            "prometheus_url": urls["prometheus"],
            "runbook_base_url": urls["runbooks"],
        }
        bundle = render_bundle(bundle_root, fast=args.fast, urls=site_urls)
        urls["alertmanager"] = start_alertmanager(
            group,
            run_dir / "alertmanager",
            port_to_use(ALERTMANAGER_PORT, any_port=any_port),
            alertmanager_config(urls["webhook"], group_wait=timing.group_wait),
        )
        start_prometheus(
            group,
            run_dir / "prometheus",
            prometheus_port,
            prometheus_config(
                job=bundle.config.job,
                exporter=urls["exporter"].removeprefix("http://"),
                rule_file=bundle.rule_file,
                alertmanager=urls["alertmanager"].removeprefix("http://"),
                scrape_interval=timing.scrape_interval,
            ),
        )
        print(banner(args, urls, bundle, timing))
        return asyncio.run(run_traffic(redis_url, args, fired, timing))


def _stopping() -> None:
    # A second Ctrl-C must not cut the shutdown short and leave children behind: every
    # stop below has its own deadline, so ignoring it costs at most those seconds.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("\nstopping Prometheus, Alertmanager, the exporter, the workers and redis-server")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # while starting: unwind, stopping what has started


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    parser.add_argument("--seconds", type=float, default=0, help="stop after N seconds (0: Ctrl-C)")
    parser.add_argument("--rate", type=float, default=20.0, help="jobs per second, all types")
    parser.add_argument("--workers", type=int, default=2, help="worker processes per agent type")
    parser.add_argument("--port", type=int, default=9808, help="exporter port (another if busy)")
    parser.add_argument(
        "--until-alert",
        action="store_true",
        help=f"stop once {WATCHED_ALERT} has arrived (exit 1 if --seconds pass first)",
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help=f"{WATCHED_ALERT} within seconds: scrape and evaluate every 1s, more than 3 dead"
        " jobs for 5s (the demo's test uses it)",
    )
    parser.add_argument(
        "--free-ports",
        action="store_true",
        help="any free ports, not 9808, 9090, 9093 and 8000 (parallel runs, tests)",
    )
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    # Explicit for SIGINT too: a shell starting the demo in the background ignores it.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    try:
        code = run(args)
    except (DemoError, ConfigurationError) as exc:
        print(f"demo: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    print("stopped everything the demo started")
    sys.exit(code)


if __name__ == "__main__":
    main()
