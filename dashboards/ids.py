"""Fixed dashboard uids and panel ids: alerts and runbooks link to these, so they never move."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["QUEUE_OVERVIEW_UID", "QueueOverviewPanel"]

QUEUE_OVERVIEW_UID = "queue-overview"


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
    ROW_LATENCY = 30
    LATENCY_HEATMAP = 31
    LATENCY_QUANTILES = 32
    ROW_WORKERS = 40
    ACTIVE_WORKERS = 41
    HEARTBEAT_AGE = 42
    ROW_EXPORTER = 50
    EXPORTER_UP = 51
    SCRAPE_DURATION = 52
    EXPORTER_ERRORS = 53
