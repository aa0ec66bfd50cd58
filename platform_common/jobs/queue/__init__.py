"""The Redis job queue: per-agent-type queues, reliable workers, retries, dead letters,
results and completion events. Key layout and counters: see platform_common.jobs.keys."""

from __future__ import annotations

from ..status import AttemptOutcome, QueueState
from .api import JobQueue, QueueStats
from .completions import Completion, Completions
from .connection import QueueConnection
from .consumer import Worker
from .context import AsyncHandler, Handler, JobContext, NonRetryableError, SyncHandler, current_job
from .dead_letters import DeadLetter, DeadLetters
from .leases import Claim, Leases
from .maintenance import Maintenance, ReapReport
from .payload import JobPayload, payload_errors
from .producer import Producer
from .queue_settings import DEFAULT_AGENT_TYPES, QueueSettings
from .results import JobResult

__all__ = [
    "DEFAULT_AGENT_TYPES",
    "AsyncHandler",
    "AttemptOutcome",
    "Claim",
    "Completion",
    "Completions",
    "DeadLetter",
    "DeadLetters",
    "Handler",
    "JobContext",
    "JobPayload",
    "JobQueue",
    "JobResult",
    "Leases",
    "Maintenance",
    "NonRetryableError",
    "Producer",
    "QueueConnection",
    "QueueSettings",
    "QueueState",
    "QueueStats",
    "ReapReport",
    "SyncHandler",
    "Worker",
    "current_job",
    "payload_errors",
]
