"""platform_common.jobs: the JobStore contract and its memory:// and redis:// backends.

    from platform_common.jobs import JobStatus, make_job_store

    job_store = make_job_store()  # reads JOB_STORE_URL

The queue, the HTTP router and the test helpers live in their own subpackages and
modules (`platform_common.jobs.queue`, `.http`, `.testing`) and are not imported here.
"""

from .errors import (
    BackendUnavailable,
    ConfigurationError,
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
from .factory import make_job_store
from .listing import BackfillReport, Page
from .memory_store import InMemoryJobStore
from .record import JobRecord
from .redis_store import RedisJobStore
from .status import JobStatus
from .store import JobStore

__all__ = [
    "BackendUnavailable",
    "BackfillReport",
    "ConfigurationError",
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
