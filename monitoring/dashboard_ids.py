"""Fixed dashboard uid, panel ids and panel titles: alerts and runbooks link to these."""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType

__all__ = ["PANEL_TITLES", "QUEUE_OVERVIEW_TITLE", "QUEUE_OVERVIEW_UID", "QueueOverviewPanel"]

QUEUE_OVERVIEW_UID = "queue-overview"
QUEUE_OVERVIEW_TITLE = "Queue overview"


class QueueOverviewPanel(IntEnum):
    """Panel ids of the queue overview dashboard (rows included: ids are dashboard-wide)."""

    ROW_ALERTS = 1
    ALERT_STATS = 100
    """First of the alert row's stats: one per alert, in spec order (100, 101, ...)."""
    ROW_QUEUE = 10
    QUEUE_DEPTH = 11
    DEAD_LETTER_DEPTH = 12
    IN_FLIGHT = 13
    OLDEST_JOB_AGE = 14
    ROW_THROUGHPUT = 20
    THROUGHPUT = 21
    RETRIES = 22
    FAILURE_RATIO = 23
    FAILURES_BY_CLASS = 24
    ROW_LATENCY = 30
    LATENCY_HEATMAP = 31
    LATENCY_QUANTILES = 32
    WAIT_AND_RUN = 33
    ROW_WORKERS = 40
    ACTIVE_WORKERS = 41
    HEARTBEAT_AGE = 42
    WORKER_HEARTBEATS = 43
    WORKER_JOBS = 44
    ROW_EXPORTER = 50
    EXPORTER_UP = 51
    SCRAPE_DURATION = 52
    EXPORTER_ERRORS = 53
    ROW_REDIS = 60
    REDIS_MEMORY = 61
    REDIS_EVICTION_POLICY = 62
    REDIS_CLIENTS = 63
    REDIS_EVICTIONS = 64
    ROW_SLO = 70
    SLO_AVAILABILITY = 71
    SLO_AVAILABILITY_BUDGET = 72
    SLO_AVAILABILITY_BURN = 73
    SLO_LATENCY = 74
    SLO_LATENCY_BUDGET = 75
    SLO_LATENCY_BURN = 76


_P = QueueOverviewPanel
PANEL_TITLES: Mapping[QueueOverviewPanel, str] = MappingProxyType(
    {
        _P.ROW_ALERTS: "Alerts and SLOs",
        _P.ROW_QUEUE: "Queues",
        _P.QUEUE_DEPTH: "Queue depth per agent type",
        _P.DEAD_LETTER_DEPTH: "Dead-letter depth",
        _P.IN_FLIGHT: "In progress and waiting for retry",
        _P.OLDEST_JOB_AGE: "Oldest waiting job age",
        _P.ROW_THROUGHPUT: "Throughput",
        _P.THROUGHPUT: "Throughput: enqueued, started, completed, failed",
        _P.RETRIES: "Retries, dead letters, expiries",
        _P.FAILURE_RATIO: "Failure ratio",
        _P.FAILURES_BY_CLASS: "Failed attempts by exception class",
        _P.ROW_LATENCY: "Latency",
        _P.LATENCY_HEATMAP: "Job latency distribution",
        _P.LATENCY_QUANTILES: "Job latency p50 / p95 / p99",
        _P.WAIT_AND_RUN: "Waiting for a worker vs in the handler (p50 / p95)",
        _P.ROW_WORKERS: "Workers",
        _P.ACTIVE_WORKERS: "Active workers",
        _P.HEARTBEAT_AGE: "Time since the newest worker heartbeat",
        _P.WORKER_HEARTBEATS: "Heartbeat age per worker",
        _P.WORKER_JOBS: "Jobs in progress per worker",
        _P.ROW_EXPORTER: "Exporter",
        _P.EXPORTER_UP: "Exporter and Redis up",
        _P.SCRAPE_DURATION: "Scrape duration",
        _P.EXPORTER_ERRORS: "Exporter data problems",
        _P.ROW_REDIS: "Redis",
        _P.REDIS_MEMORY: "Redis memory per primary",
        _P.REDIS_EVICTION_POLICY: "Redis eviction policy",
        _P.REDIS_CLIENTS: "Redis clients per primary",
        _P.REDIS_EVICTIONS: "Redis evicted keys",
        _P.ROW_SLO: "Service-level objectives",
        _P.SLO_AVAILABILITY: "Availability SLI and objective",
        _P.SLO_AVAILABILITY_BUDGET: "Availability error budget left",
        _P.SLO_AVAILABILITY_BURN: "Availability error budget burn rate",
        _P.SLO_LATENCY: "Latency SLI and objective",
        _P.SLO_LATENCY_BUDGET: "Latency error budget left",
        _P.SLO_LATENCY_BURN: "Latency error budget burn rate",
    }
)
"""Title of every panel but the alert stats (each titled by its alert's name). The
runbooks name the panel an alert links to, so the title lives here, not in the layout."""
