"""What an operator does to the queue, as plain reads and actions returning typed
dataclasses: the one layer under the `agentjobs` commands and the console (they import
it, never the reverse). No rendering here: the CLI modules parse options and draw the
results.

    info        overview.read_overview, RecentCounts (the last minute, while watching),
                prometheus.last_minute, recorded_history (without a Prometheus)
    workers     workers.read_workers
    job show    jobs.show_job (dead show, failed show: show_dead_letter)
    dead ...    dead_letter_ops: list, select (ids | all | error matches), requeue,
    failed ...  purge; one implementation for both kept lists (KeptList)
    console     job_pages.list_jobs, job_search.find_job, and for its chart without a
                Prometheus recorded_history and history.CounterHistory
    slo         slo_status.read_slos

Each works on a JobQueue (operator_queue opens one as the worker would) through its
public API, and reads Redis directly only for what no API offers, in bounded pages.
"""

from __future__ import annotations

from .dead_letter_ops import (
    MAX_SCAN,
    DeadLetterAction,
    DeadLetterLine,
    DeadLetterListing,
    DeadSelection,
    KeptList,
    Progress,
    SelectionKind,
    list_dead_letters,
    purge_dead_letters,
    requeue_dead_letters,
    select_dead_letters,
)
from .history import CounterHistory, Minute
from .job_pages import MAX_PAGE_SIZE, JobLine, JobList, JobPage, list_jobs
from .jobs import Attempt, JobDetail, NotADeadLetter, Unparsed, show_dead_letter, show_job
from .overview import Counts, Overview, Recent, RecentCounts, TypeOverview, read_overview
from .session import AgentTypes, agent_types, operator_queue
from .workers import WorkersReport, WorkerStatus, read_workers

__all__ = [
    "MAX_PAGE_SIZE",
    "MAX_SCAN",
    "AgentTypes",
    "Attempt",
    "CounterHistory",
    "Counts",
    "DeadLetterAction",
    "DeadLetterLine",
    "DeadLetterListing",
    "DeadSelection",
    "JobDetail",
    "JobLine",
    "JobList",
    "JobPage",
    "KeptList",
    "Minute",
    "NotADeadLetter",
    "Overview",
    "Progress",
    "Recent",
    "RecentCounts",
    "SelectionKind",
    "TypeOverview",
    "Unparsed",
    "WorkerStatus",
    "WorkersReport",
    "agent_types",
    "list_dead_letters",
    "list_jobs",
    "operator_queue",
    "purge_dead_letters",
    "read_overview",
    "read_workers",
    "requeue_dead_letters",
    "select_dead_letters",
    "show_dead_letter",
    "show_job",
]
