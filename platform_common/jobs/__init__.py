"""platform_common.jobs: the JobStore contract and its memory:// and redis:// backends.

    from platform_common.jobs import JobStatus, make_job_store

    job_store = make_job_store()  # reads JOB_STORE_URL

The queue (`platform_common.jobs.queue`) and the FastAPI router
(`platform_common.jobs.store.http`, the `http` extra) are not imported here.
"""

from .errors import (
    BackendBusy,
    BackendOutOfMemory,
    BackendUnavailable,
    ConfigurationError,
    CorruptQueueState,
    IllegalTransition,
    InvalidCursor,
    InvalidJobId,
    InvalidRecord,
    InvalidTTL,
    JobConflict,
    JobNotFound,
    JobsError,
    ValidationError,
    VersionConflict,
)
from .status import JobStatus
from .store.contract import JobStore
from .store.factory import make_job_store
from .store.listing import BackfillReport, Page
from .store.memory import InMemoryJobStore
from .store.record import JobRecord
from .store.redis_store import RedisJobStore

__all__ = [
    "BackendBusy",
    "BackendOutOfMemory",
    "BackendUnavailable",
    "BackfillReport",
    "ConfigurationError",
    "CorruptQueueState",
    "IllegalTransition",
    "InMemoryJobStore",
    "InvalidCursor",
    "InvalidJobId",
    "InvalidRecord",
    "InvalidTTL",
    "JobConflict",
    "JobNotFound",
    "JobRecord",
    "JobStatus",
    "JobStore",
    "JobsError",
    "Page",
    "RedisJobStore",
    "ValidationError",
    "VersionConflict",
    "make_job_store",
]
