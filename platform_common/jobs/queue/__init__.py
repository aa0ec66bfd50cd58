"""The Redis job queue, the producer side: enqueue, results, completion events, dead
letters and the operator's view. The consumer side is `platform_common.jobs.worker`;
key layout and counters: `platform_common.jobs.keys`."""

from __future__ import annotations

from ..status import AttemptOutcome, QueueState
from .api import JobQueue, QueueStats
from .cancel import CancelOutcome, CancelReport
from .completions import Completion, Completions
from .connection import QueueConnection
from .context import AsyncHandler, Handler, JobContext, NonRetryableError, SyncHandler, current_job
from .dead_letters import DeadLetter, DeadLetters
from .limits import Limits, Rate
from .pausing import PauseState
from .payload import JobPayload, payload_errors
from .producer import Producer
from .progress import Progress
from .progress_events import ProgressEvents
from .queue_settings import DEFAULT_AGENT_TYPES, QueueSettings
from .results import JobResult

__all__ = [
    "DEFAULT_AGENT_TYPES",
    "AsyncHandler",
    "AttemptOutcome",
    "CancelOutcome",
    "CancelReport",
    "Completion",
    "Completions",
    "DeadLetter",
    "DeadLetters",
    "Handler",
    "JobContext",
    "JobPayload",
    "JobQueue",
    "JobResult",
    "Limits",
    "NonRetryableError",
    "PauseState",
    "Producer",
    "Progress",
    "ProgressEvents",
    "QueueConnection",
    "QueueSettings",
    "QueueState",
    "QueueStats",
    "Rate",
    "SyncHandler",
    "current_job",
    "payload_errors",
]
