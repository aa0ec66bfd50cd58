"""Monitoring against the real thing: a real Prometheus scrapes the real exporter while
real worker processes run a real workload; every dashboard and alert query is evaluated
there, and an alert travels Prometheus -> Alertmanager -> a webhook with its runbook_url,
which the exporter then serves.

Uses the alert spec's test settings (every `for` 2 s, rules evaluated every second).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from platform_common.jobs.dashboard_ids import QueueOverviewPanel
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobQueue
from platform_common.jobs_monitoring import outputs
from platform_common.jobs_monitoring.alerts.prometheus_rules import rule_file
from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.spec import alert_specs
from tests.support.alertmanager import AlertmanagerServer, WebhookReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.fair_share_data import enqueue_keyed, plant_waits
from tests.support.prometheus import PrometheusError, PrometheusServer
from tests.support.queue_handlers import behaviour, make_job
from tests.support.redis_server import RedisServer
from tests.support.workers import FAST_SETTINGS, WorkerGroup, wait_until

ROOT = Path(__file__).resolve().parents[2]
JOB = "queue-exporter"  # PrometheusServer's job name, and the alerts' default selector
WORKED = ("dining", "flights")
BACKLOG = "transportation"  # no worker ever runs for it: the end-to-end test fills it
FAIR = "experiences"  # no worker either: fair share's keys wait there
HANDLER = "tests.support.queue_handlers:behave"
# Grafana's values for the variables: "All" is the allValue `.+`.
VARIABLES = {"$__rate_interval": "1m", "$job": JOB, "$instance": ".+", "$agent_type": ".+"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(shutil.which(b) for b in ("prometheus", "prometheus-alertmanager", "amtool")),
        reason="needs prometheus and prometheus-alertmanager",
    ),
]


@dataclass
class Live:
    config: MonitoringConfig
    exporter: ExporterProcess
    prometheus: PrometheusServer
    hook: WebhookReceiver
    redis_url: str


def _workload() -> list[dict[str, Any]]:
    """Successes, slow jobs, a retry that then succeeds, poison pills, a refusal."""
    jobs = []
    for agent_type in WORKED:
        jobs += [make_job(agent_type) for _ in range(12)]
        jobs += [
            make_job(agent_type, constraints=behaviour("sleep", seconds=0.2)) for _ in range(3)
        ]
        jobs.append(make_job(agent_type, constraints=behaviour("fail_until", succeed_on=2)))
        jobs.append(make_job(agent_type, constraints=behaviour("fatal")))
    jobs += [make_job("dining", constraints=behaviour("fail")) for _ in range(2)]
    return jobs


async def _enqueue(redis_url: str, jobs: list[dict[str, Any]]) -> None:
    async with await JobQueue.connect(redis_url) as queue:
        # Limits that never bind this workload: the Limits row's lines have data.
        await queue.set_limits("flights", rate="1000/s", max_running=50)
        # Fair share on a type no worker runs, its keys waiting as the enqueue leaves
        # them (their waits planted by _plant_fair_waits): the fair share panels have data.
        await queue.set_limits(FAIR, fair_by="tenant", max_running_per_key=2)
        await enqueue_keyed(queue, FAIR, {"acme": 2, "globex": 1, "initech": 1})
        await queue.enqueue_many(jobs)


def _plant_fair_waits(redis_url: str) -> None:
    """acme has gone a minute without a start, the others a second or two."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        plant_waits(client, FAIR, {"acme": 60_000, "globex": 2_000, "initech": 1_000})
    finally:
        client.close()


def _finished(redis_url: str, expected: int) -> bool:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        done = 0
        for agent_type in WORKED:
            stats: dict[str, str] = client.hgetall(QueueKeys(agent_type).stats)  # type: ignore[assignment]
            done += int(stats.get("completed", 0)) + int(stats.get("failed", 0))
        return done == expected
    finally:
        client.close()


@pytest.fixture(scope="module")
def live(redis_server: RedisServer) -> Iterator[Live]:
    admin = redis.Redis(port=redis_server.port)
    admin.flushall()
    admin.close()
    redis_url = redis_server.url
    directory = Path(tempfile.mkdtemp(prefix="pcj-monitoring-"))
    exporter = ExporterProcess(
        "--redis-url", redis_url, "--agent-types", ",".join([*WORKED, BACKLOG, FAIR]),
        "--fair-key-top", "2",
    )  # fmt: skip
    config = replace(load_config(), job=JOB, runbook_base_url=f"{exporter.url}/runbooks/")
    rules = directory / "rules.yml"
    rules.write_text(yaml.safe_dump(rule_file(config.test_settings(for_="2s", interval="1s"))))
    try:
        with (
            WebhookReceiver() as hook,
            AlertmanagerServer(hook.url) as alertmanager,
            PrometheusServer(
                targets=[exporter.url.removeprefix("http://")],
                job_name=JOB,
                rule_files=[rules],
                alertmanager=alertmanager.address,
            ) as prometheus,
            WorkerGroup(redis_url, "dining", HANDLER, env=FAST_SETTINGS) as dining,
            WorkerGroup(redis_url, "flights", HANDLER, env=FAST_SETTINGS) as flights,
        ):
            assert alertmanager.check_config().returncode == 0
            dining.start(concurrency=4)
            flights.start(concurrency=2)
            jobs = _workload()
            asyncio.run(_enqueue(redis_url, jobs))
            _plant_fair_waits(redis_url)
            wait_until(lambda: _finished(redis_url, len(jobs)), timeout=60, interval=0.2)
            # Prometheus has scraped the final state (dead letters, completions), and
            # every counter of every type often enough for rate() to have two samples.
            prometheus.wait_for('sum(dead_letter_depth{agent_type="dining"})', _equals(2))
            prometheus.wait_for(f"count(jobs_completed_total{{job='{JOB}'}} > 0)", _equals(2))
            prometheus.wait_for(
                f"min(count_over_time(jobs_enqueued_total{{job='{JOB}'}}[1m]))",
                lambda result: bool(result) and result[0].value >= 3,
            )
            yield Live(config, exporter, prometheus, hook, redis_url)
    finally:
        exporter.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _equals(value: float) -> Any:
    return lambda result: bool(result) and result[0].value == value


def _substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def _dashboard_queries() -> list[tuple[str, str, bool]]:
    """(where, PromQL, should have data) for every target and variable of every dashboard."""
    specs = alert_specs(load_config())
    queries = []
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            offset = panel["id"] - int(QueueOverviewPanel.ALERT_STATS)
            # Alert-row stats of alerts that are silent on a healthy system may be empty.
            expect = not 0 <= offset < len(specs) or specs[offset].expect_data
            for target in panel.get("targets", []):
                where = f"{path.name} panel {panel['id']} {target['refId']}"
                queries.append((where, _substitute(target["expr"]), expect))
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                # Grafana's label_values(selector, label): Prometheus evaluates the selector.
                match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
                assert match, variable["query"]
                where = f"{path.name} variable {variable['name']}"
                queries.append((where, _substitute(match[1]), True))
    return queries


def _alert_queries() -> list[tuple[str, str, bool]]:
    """Every expression of the committed Prometheus and Grafana rule files."""
    expect = {spec.name: spec.expect_data for spec in alert_specs(load_config())}
    prometheus = yaml.safe_load((ROOT / outputs.PROMETHEUS_RULES).read_text())
    grafana = yaml.safe_load((ROOT / outputs.GRAFANA_ALERT_RULES).read_text())
    queries = []
    for rule in prometheus["groups"][0]["rules"]:
        queries.append((f"rule {rule['alert']}", rule["expr"], False))
    for rule in grafana["groups"][0]["rules"]:
        query = rule["data"][0]["model"]["expr"]
        queries.append((f"grafana {rule['title']} A", query, expect[rule["title"]]))
    return queries


def _runbook_queries() -> list[tuple[str, str, bool]]:
    pattern = re.compile(r"promtool query instant \"\$PROMETHEUS_URL\" '([^']+)'")
    return [
        (f"runbook {path.stem}", query, False)
        for path in sorted((ROOT / outputs.RUNBOOKS_DIR).glob("*.md"))
        for query in pattern.findall(path.read_text())
    ]


def test_every_dashboard_alert_and_runbook_query_evaluates(live: Live) -> None:
    queries = _dashboard_queries() + _alert_queries() + _runbook_queries()
    assert len(queries) > 60
    problems = []
    with_data = 0
    for where, expr, should_have_data in queries:
        try:
            result = live.prometheus.query(expr)
        except PrometheusError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if should_have_data and not result:
            problems.append(f"{where}: no data for {expr}")
        with_data += bool(result)
    assert not problems, "\n".join(problems)
    assert with_data >= sum(expected for _, _, expected in queries)


def test_queries_show_what_the_workload_did(live: Live) -> None:
    # Spot checks that the numbers, not just the shapes, come through.
    sel = f'job="{JOB}"'
    dead = live.prometheus.query(f"max by (agent_type) (dead_letter_depth{{{sel}}})")
    assert {s.labels["agent_type"]: s.value for s in dead}["dining"] == 2
    workers = live.prometheus.query(f"max by (agent_type) (active_workers{{{sel}}})")
    assert {s.labels["agent_type"]: s.value for s in workers} == {
        "dining": 1, "flights": 1, BACKLOG: 0, FAIR: 0,
    }  # fmt: skip
    # Fair share: three keys waiting, acme the longest without a start (a minute at least).
    oldest = live.prometheus.query(f"max(queue_fair_key_oldest_wait_seconds{{{sel}}})")
    assert oldest[0].value >= 60
    keys = live.prometheus.query(f'max(queue_fair_keys_waiting{{{sel}, agent_type="{FAIR}"}})')
    assert keys[0].value == 3
    buckets = f'job_latency_seconds_bucket{{{sel}, agent_type="dining"}}'
    [p95] = live.prometheus.query(f"histogram_quantile(0.95, max by (le) ({buckets}))")
    assert 0 < p95.value < 30  # quick jobs, one retry: far below the 30 s default SLO
    # Failed attempts by class: dining's 2 poison jobs (3 attempts each) and 1 retry, plus
    # the non-retryable one, whose class is the exception's.
    failures = live.prometheus.query(
        f'max by (error_class) (jobs_attempts_failed_total{{{sel}, agent_type="dining"}})'
    )
    assert {s.labels["error_class"]: s.value for s in failures} == {
        "RuntimeError": 7, "NonRetryableError": 1,
    }  # fmt: skip
    # Wait and run each count every success, as the latency histogram does.
    counts = {
        name: live.prometheus.query(f'max({name}_count{{{sel}, agent_type="dining"}})')[0].value
        for name in ("job_latency_seconds", "job_wait_seconds", "job_run_seconds")
    }
    assert counts["job_wait_seconds"] == counts["job_run_seconds"] == counts["job_latency_seconds"]
    [clients] = live.prometheus.query(f"max(queue_redis_connected_clients{{{sel}}})")
    assert clients.value >= 3  # the exporter and two worker groups at least


def test_alert_reaches_alertmanager_with_a_runbook_url_the_exporter_serves(live: Live) -> None:
    depth = live.config.queue_depth_high + 5
    assert not [a for a in live.hook.received() if a["labels"].get("alertname") == "QueueDepthHigh"]
    backlog = [make_job(BACKLOG) for _ in range(depth)]
    asyncio.run(_enqueue(live.redis_url, backlog))

    def depth_high_for_backlog(alert: dict[str, Any]) -> bool:
        labels: dict[str, str] = alert["labels"]
        return labels.get("alertname") == "QueueDepthHigh" and labels.get("agent_type") == BACKLOG

    [alert] = live.hook.wait_for(depth_high_for_backlog, timeout=60)
    assert alert["status"] == "firing"
    assert alert["labels"]["severity"] == "warning" and alert["labels"]["action"] == "scale-up"
    assert alert["annotations"]["summary"] == (
        f"Queue {BACKLOG} has {depth} jobs waiting (threshold {live.config.queue_depth_high})."
    )
    url = alert["annotations"]["runbook_url"]
    assert url == f"{live.exporter.url}/runbooks/QueueDepthHigh.html"
    page = httpx.get(url, timeout=5)
    assert page.status_code == 200
    assert "<h1>QueueDepthHigh</h1>" in page.text and "<h2>Mitigation</h2>" in page.text
    # The worked queues stayed below the threshold: no such alert for them.
    assert not [
        a
        for a in live.hook.received()
        if a["labels"].get("alertname") == "QueueDepthHigh" and a["labels"]["agent_type"] in WORKED
    ]
    # And the backlog without workers is the other alert it should be.
    live.hook.wait_for(
        lambda a: (
            a["labels"].get("alertname") == "QueueNoActiveWorkers"
            and a["labels"].get("agent_type") == BACKLOG
        )
    )
