"""The metric catalogue: every metric's name, type, help, unit and labels, declared once.

The exporter emits exactly these; the dashboards, alerts, runbooks and the README's
metric table are generated from them; a test checks the live exposition against them.
It lives in the core (data only) because the core reads the exporter's counters back
from Prometheus too (`agentjobs info`, the console), and imports flow one way.
Names follow the Prometheus guide: base units, `_total` on counters, `_seconds` on durations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from platform_common.jobs.keys import MAX_ERROR_CLASSES, OTHER_ERROR_CLASS

__all__ = [
    "AGENT_TYPE",
    "CATALOGUE",
    "ERROR_CLASS",
    "FAIR_BY",
    "FAIR_KEY",
    "FAIR_READ_ALL_KEYS",
    "FAIR_SAMPLE_KEYS",
    "HEARTBEAT_CLOCK_TOLERANCE_MS",
    "MAX_FAIR_KEY_TOP",
    "MAX_WORKERS_PER_TYPE",
    "NODE",
    "POLICY",
    "WORKER",
    "Metric",
    "by_key",
]

MetricType = Literal["gauge", "counter", "histogram"]
AGENT_TYPE = "agent_type"
ERROR_CLASS = "error_class"
"""The exception class of a failed attempt: bounded by the queue (keys.MAX_ERROR_CLASSES
per agent type, the first seen; later ones count as `other`), and in length
(label_values.MAX_LABEL_VALUE_BYTES)."""
WORKER = "worker"
"""A worker's id, for at most MAX_WORKERS_PER_TYPE workers per agent type, bounded in
length (label_values.MAX_LABEL_VALUE_BYTES)."""
MAX_WORKERS_PER_TYPE = 50
"""Workers per agent type with a series of their own: the stalest heartbeats, the ones
on-call looks for (a bounded label whatever the fleet's size)."""
HEARTBEAT_CLOCK_TOLERANCE_MS = 2_000
"""How far past the reader's Redis TIME a heartbeat may be dated and still be believed
(a beat written between TIME and the read, or by a cluster node whose clock runs a
little ahead). A later one proves nothing of its worker (Redis' clock stepped back, or
the score was written by hand): it counts as active nowhere (the exporter, `agentjobs
info` and `workers`, the console), is not the newest heartbeat and has no age series
(the exporter counts it as malformed). A live worker's next beat replaces it."""
PRIORITY = "priority"
"""A priority level (queue/priority.py): three values, never more."""
NODE = "node"
"""A Redis server (host:port; each primary of a cluster), for what Redis reports itself."""
POLICY = "policy"
FAIR_BY = "fair_by"
"""The payload field fair share goes by (keys.FAIR_BY_KEYS): three values."""
FAIR_KEY = "fair_key"
"""A fairness key (a tenant, orchestrator or session id), only on queue_fair_key_backlog,
which the exporter publishes for its --fair-key-top keys alone (off by default: one
series per tenant is unbounded, and may name a customer); a capped label value
(label_values.MAX_LABEL_VALUE_BYTES)."""
FAIR_READ_ALL_KEYS = 10_000
"""Up to this many fairness keys waiting, the exporter reads every key's wait (HGETALL of
the ring's since hash, keys.py) per agent type and scrape; beyond, a random sample of
FAIR_SAMPLE_KEYS (HRANDFIELD): a bound on the read's cost whatever the number of
tenants. queue_fair_keys_waiting counts them all (HLEN)."""
FAIR_SAMPLE_KEYS = 1_000
"""Keys the exporter samples when more than FAIR_READ_ALL_KEYS wait."""
MAX_FAIR_KEY_TOP = 50
"""Most keys --fair-key-top may publish a backlog series for, per agent type."""


@dataclass(frozen=True, slots=True)
class Metric:
    key: str
    """Stable handle used by code (`by_key("queue_depth")`), independent of any prefix."""
    name: str
    """Exposed series name without namespace; counters end in `_total`."""
    type: MetricType
    help: str
    unit: str
    """Grafana unit for panels showing this metric (`short`, `s`, `ops`, `bytes`, ...)."""
    labels: tuple[str, ...] = (AGENT_TYPE,)

    @property
    def family(self) -> str:
        """The name given to prometheus-client metric families (no `_total`)."""
        return self.name.removesuffix("_total") if self.type == "counter" else self.name

    def full_name(self, namespace: str = "") -> str:
        return f"{namespace}_{self.name}" if namespace else self.name


CATALOGUE: tuple[Metric, ...] = (
    # The six every queue dashboard reads, under exactly these names.
    Metric("queue_depth", "queue_depth", "gauge", "Jobs waiting to be taken: never-claimed jobs (HLEN of its queued hash) plus retries and released jobs (ZCARD of its waiting set).", "short"),
    Metric("enqueued", "jobs_enqueued_total", "counter", "Jobs accepted by enqueue.", "short"),
    Metric("completed", "jobs_completed_total", "counter", "Jobs whose handler succeeded.", "short"),
    Metric("failed", "jobs_failed_total", "counter", "Jobs that failed for good (last attempt used or not retryable).", "short"),
    Metric("latency", "job_latency_seconds", "histogram", "Time from enqueue (a scheduled job: from its due time) to successful completion.", "s"),
    Metric("wait", "job_wait_seconds", "histogram", "Time a job's succeeding attempt waited for a worker: from its becoming due (enqueue, or its retry's due time) to its start.", "s"),
    Metric("run", "job_run_seconds", "histogram", "Time a job's succeeding attempt spent in the handler: from its start to completion.", "s"),
    Metric("dead_letter_depth", "dead_letter_depth", "gauge", "Jobs in the dead-letter list.", "short"),
    # What on-call needs beside them.
    Metric("in_progress", "jobs_in_progress", "gauge", "Jobs taken by a worker and not yet finished.", "short"),
    Metric("depth_by_priority", "queue_depth_by_priority", "gauge", "Jobs waiting to be taken, by priority level (high, normal, low): a breakdown of queue_depth, which stays the total that autoscaling and alerts read.", "short", (AGENT_TYPE, PRIORITY)),
    Metric("delayed_depth", "jobs_delayed", "gauge", "Jobs waiting in the delayed sorted set: retries for their backoff, scheduled jobs for their time.", "short"),
    Metric("paused", "queue_paused", "gauge", "1 while the agent type is paused (JobQueue.pause, agentjobs pause): workers start none of its jobs; else 0.", "short"),
    Metric("rate_limit", "queue_rate_limit_per_second", "gauge", "Job starts per second the agent type's rate limit allows across every worker (agentjobs limits set --rate); no sample when it has none.", "short"),
    Metric("max_running_limit", "queue_max_running_limit", "gauge", "Most jobs of the agent type that may run at once across every worker (agentjobs limits set --max-running); no sample when it has none.", "short"),
    Metric("held_back_rate", "jobs_held_back_by_rate_total", "counter", "Job starts the agent type's rate limit held back: each claim adds the jobs it asked for and did not start (a job waiting through several claims counts at each).", "short"),
    Metric("held_back_max_running", "jobs_held_back_by_max_running_total", "counter", "Job starts the agent type's max_running held back: each claim adds the jobs it asked for and did not start (a job waiting through several claims counts at each).", "short"),
    # Fair share (agentjobs limits set --fair-by): how its keys wait (exporter/fair_share.py).
    Metric("held_back_max_running_per_key", "jobs_held_back_by_max_running_per_key_total", "counter", "Job starts held back because their fairness key was at the agent type's max_running_per_key: each claim adds the jobs it asked for and did not start.", "short"),
    Metric("max_running_per_key_limit", "queue_max_running_per_key_limit", "gauge", "Most jobs of one fairness key that may run at once (agentjobs limits set --max-running-per-key); no sample when it has none.", "short"),
    Metric("fair_share_by", "queue_fair_share_by", "gauge", "1, labelled with the payload field fair share goes by (tenant, orchestrator_id or session_id); no sample when fair share is off.", "short", (AGENT_TYPE, FAIR_BY)),
    Metric("fair_keys_waiting", "queue_fair_keys_waiting", "gauge", "Fairness keys with jobs waiting (the keys on fair share's ring; 0 without fair share).", "short"),
    Metric("fair_key_oldest_wait", "queue_fair_key_oldest_wait_seconds", "gauge", "The longest any fairness key with jobs waiting has gone without a start: since it joined the ring, or since the claim last started one of its jobs (a key held at max_running_per_key ages too). Over every key up to " f"{FAIR_READ_ALL_KEYS} keys waiting, over a random sample of {FAIR_SAMPLE_KEYS} beyond; no sample when none waits.", "s"),
    Metric("fair_key_median_wait", "queue_fair_key_median_wait_seconds", "gauge", "The median over fairness keys with jobs waiting of how long each has gone without a start (the keys as for queue_fair_key_oldest_wait_seconds); far below that oldest, one key is starved. No sample when none waits.", "s"),
    Metric("fair_key_backlog", "queue_fair_key_backlog", "gauge", "Jobs waiting on each of the fairness keys with the largest backlog, for the exporter's --fair-key-top keys (default 0: no series), among the keys read (a random " f"{FAIR_SAMPLE_KEYS} beyond {FAIR_READ_ALL_KEYS} keys waiting).", "short", (AGENT_TYPE, FAIR_KEY)),
    Metric("started", "jobs_started_total", "counter", "Attempts started by workers.", "short"),
    Metric("retried", "jobs_retried_total", "counter", "Failed attempts scheduled for a retry.", "short"),
    Metric("dead_lettered", "jobs_dead_lettered_total", "counter", "Jobs moved to the dead-letter list.", "short"),
    Metric("expired", "jobs_expired_total", "counter", "Jobs dropped because their TTL passed before completion.", "short"),
    Metric("cancelled", "jobs_cancelled_total", "counter", "Jobs cancelled on request (JobQueue.cancel, cancel_session, agentjobs job cancel): while waiting, or when their running attempt ended; their result is never stored.", "short"),
    Metric("attempts_failed", "jobs_attempts_failed_total", "counter", "Attempts that ended in an error (retried, dead-lettered or failed for good), by exception class; at most " f"{MAX_ERROR_CLASSES} classes per agent type, the rest as `{OTHER_ERROR_CLASS}`.", "short", (AGENT_TYPE, ERROR_CLASS)),
    Metric("oldest_age", "oldest_job_age_seconds", "gauge", "Age of the oldest waiting job (0 when the queue is empty).", "s"),
    Metric("active_workers", "active_workers", "gauge", "Workers whose heartbeat is recent.", "short"),
    Metric("last_heartbeat", "worker_last_heartbeat_timestamp_seconds", "gauge", "Unix time of the newest worker heartbeat.", "dateTimeAsIso"),
    Metric("worker_heartbeat_age", "worker_heartbeat_age_seconds", "gauge", "Seconds since each worker's last heartbeat; at most " f"{MAX_WORKERS_PER_TYPE} workers per agent type, the stalest.", "s", (AGENT_TYPE, WORKER)),
    Metric("worker_jobs", "worker_jobs_in_progress", "gauge", "Jobs each worker is running, as its last heartbeat reported; for the same workers as worker_heartbeat_age_seconds.", "short", (AGENT_TYPE, WORKER)),
    # The exporter's own health (gauges, as Prometheus' exporter guide recommends).
    Metric("redis_up", "queue_exporter_redis_up", "gauge", "1 when the last scrape read Redis, else 0.", "short", ()),
    Metric("scrape_duration", "queue_exporter_scrape_duration_seconds", "gauge", "Time the last scrape took to read Redis.", "s", ()),
    Metric("malformed", "queue_exporter_malformed_values_total", "counter", "Values in Redis the exporter could not parse and skipped.", "short", ()),
    Metric("types_dropped", "queue_exporter_agent_types_dropped", "gauge", "Agent types not exported because the type cap was reached.", "short", ()),
    # Redis' own memory, from INFO memory (absent when the exporter may not run INFO).
    Metric("redis_memory_used", "queue_redis_memory_used_bytes", "gauge", "Memory Redis uses (INFO memory used_memory), per primary node.", "bytes", (NODE,)),
    Metric("redis_memory_max", "queue_redis_memory_max_bytes", "gauge", "Redis' memory limit (maxmemory) per primary node; 0 means no limit.", "bytes", (NODE,)),
    Metric("redis_policy_safe", "queue_redis_eviction_policy_safe", "gauge", "1 when the node's maxmemory-policy is noeviction, 0 when Redis may evict queue keys.", "short", (NODE, POLICY)),
    Metric("redis_clients", "queue_redis_connected_clients", "gauge", "Client connections to the node (INFO clients connected_clients).", "short", (NODE,)),
    Metric("redis_blocked_clients", "queue_redis_blocked_clients", "gauge", "Clients in a blocking command on the node, e.g. idle workers waiting in BLMOVE.", "short", (NODE,)),
    Metric("redis_evicted_keys", "queue_redis_evicted_keys_total", "counter", "Keys the node's maxmemory policy evicted since it started (INFO stats evicted_keys); must stay 0.", "short", (NODE,)),
)  # fmt: skip

_BY_KEY = {metric.key: metric for metric in CATALOGUE}


def by_key(key: str) -> Metric:
    return _BY_KEY[key]
