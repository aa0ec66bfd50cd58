"""Every Redis key and channel name the package uses, built here and nowhere else.

Cluster layout: every key of one agent (JobStore) or one agent type (queue) carries
that name as its hash tag, `{name}`, so each Lua script touches exactly one slot and
the same code runs on Redis Cluster. A job id is never inside braces: it would split a
job's keys from its queue's slot.

JobStore (agent = OTEL_SERVICE_NAME), prefix default "agentjobs":
    agentjobs:{agent}:<job_id>                  HASH  the record (fields below)
    agentjobs:{agent}:_idx:<owner bucket>       ZSET  time index, see time_index.py
    (job ids and owner ids must start with a letter or digit, so neither a record key
    nor an owner bucket can ever collide with the `_idx:` segment or `__shared__`)

Queue (one set per agent type), prefix default "jobs":
    jobs:{type}:queue         LIST   job ids waiting: LPUSH in by the enqueue script only
                                     (a worker drops and counts an id pushed otherwise),
                                     BLMOVE out from the right
    jobs:{type}:queue:high    LIST   ids of waiting jobs of priority "high", and
    jobs:{type}:queue:low     LIST   of priority "low" (queue/priority.py), as `queue` (which
                                     holds the "normal" ones). A high or low enqueue while
                                     `queue` is empty pushes WAKE_MARKER there, so an idle
                                     worker's BLMOVE returns; the claim drops it, takes by
                                     priority and pushes one again while level jobs wait
                                     and `queue` is empty: at most one waits. Their entries
                                     leave when the job expires, so LLEN is the depth.
    jobs:{type}:queued        HASH   job id -> the whole job, packed (queue/envelope.py),
                                     for a job enqueued and not yet claimed (a field, not
                                     a key of its own); the claim unpacks it into the job
                                     hash. HLEN is the number of such jobs.
    jobs:{type}:waiting       ZSET   job id -> time (ms) it last entered the queue list, for
                                     a job that waits WITH a job hash (a promoted retry, a
                                     released attempt, a requeued dead letter, a job of the
                                     previous layout); claim and expiry remove it.
                                     Depth = HLEN queued + ZCARD waiting.
    jobs:{type}:arrivals      ZSET   second (ms) -> second: every second in which a job
                                     still in `queued` was enqueued; with
    jobs:{type}:arrived       HASH   second (ms) -> how many jobs of `queued` it holds
                                     (field and member go at 0), the exporter reads the
                                     oldest waiting job's age (min of this and `waiting`)
                                     without reading any job
    jobs:{type}:deadline_mark STRING the deadline (ms, rounded up to EXPIRY_BUCKET_MS) no
                                     job of `queued` in deadline order expires after;
                                     expires EXPIRY_BUCKET_MS after that. A job whose
                                     deadline is no earlier than the mark minus
                                     EXPIRY_BUCKET_MS is enqueued "in order" (",o" in its
                                     packed header) and raises the mark: ordered jobs
                                     wait on the queue list in deadline order, so the
                                     cleanup expires them from its tail
                                     (lua/queue_expire_tail.lua), with no expiry bucket
                                     entry. Written by the enqueue script.
    jobs:{type}:expiring      ZSET   bucket (ms) -> bucket: the expiry buckets of `queued`
    jobs:{type}:expiring:<ms> LIST   ids of the jobs enqueued into `queued` out of
                                     deadline order (a shorter TTL than jobs ahead of
                                     them) whose deadline is in [ms, ms + EXPIRY_BUCKET_MS);
                                     the cleanup expires a bucket once it is wholly past
                                     (skipping ids no longer in `queued`). Every job of
                                     the previous layout has an entry here.
    jobs:{type}:processing    LIST   job ids taken by a worker (BLMOVE target)
    jobs:{type}:leases        ZSET   job id -> lease deadline (ms); the reaper reads it
    jobs:{type}:take:<token>  HASH   a take's marker (queue_claim.lua, AttemptCalls.take): field
                                     `ids`, the job ids one claim call took off the queue
                                     itself (the worker held jobs: no BLMOVE), in order;
                                     <token> is the call's first lease token. A replay
                                     after a lost reply finds it and hands those jobs
                                     back instead of taking more. TTL: the lease, whole
                                     seconds, plus one (later, the reaper returns the
                                     jobs); the worker's next take deletes it.
    jobs:{type}:delayed       ZSET   job id -> due time (ms): retries, and scheduled jobs
                                     (enqueue with delay or run_at: job hash written at
                                     once, field run_at); the promoter queues due ones
    jobs:{type}:expiry        ZSET   job id -> TTL deadline (ms) of every unfinished job
                                     that has a job hash (claimed, delayed, re-queued);
                                     the periodic cleanup reads it (bounded per run)
    jobs:{type}:job:<job_id>  HASH   payload, state, attempts, lease token, timestamps;
                                     `progress` (the last report of a running attempt,
                                     a JSON object) and `progress_at` (Redis ms), written
                                     by queue_progress.lua only and kept with the record
    jobs:{type}:result:<id>   STRING result JSON, with the job's TTL
    jobs:{type}:dead          LIST   job ids that used their last attempt (newest first)
    jobs:{type}:failed        LIST   job ids failed for good by a non-retryable error
                                     (newest first); both lists are capped, see retention.py
    jobs:{type}:stats         HASH   counters and histograms (below)
    jobs:{type}:paused        STRING the Redis time (ms) the type was paused at
                                     (queue/pausing.py); absent while it runs. While it
                                     exists the claim starts no job of the type (one a
                                     BLMOVE took goes back to the queue list); enqueue,
                                     retries, expiry and the chores go on.
    jobs:{type}:history       STREAM one sample a minute, entry id the minute's start (ms):
                                     fields `at` (ms read), each of STATS_COUNTERS and
                                     HISTORY_DEPTHS. Written (and trimmed to
                                     HISTORY_MINUTES) by the workers' history chore,
                                     lua/queue_history.lua, the first call of a minute;
                                     nothing on a job's path writes it. The console and
                                     `agentjobs info` read it when no Prometheus is set.
    jobs:{type}:limits        HASH   the type's limits (queue/limits.py, written by
                                     lua/queue_limits.lua; absent: plain FIFO): rate and
                                     interval_ms (starts per interval across every
                                     worker), burst, max_running, fair_by,
                                     max_running_per_key, fair share's key weights
                                     (weight:<key>) and their count `weights`. The claim
                                     reads it with one HMGET (lua/include/limits.lua),
                                     and a key's weight on its turn while `weights` > 0.
    jobs:{type}:fair          LIST   fair share's ring (queue/limits.py fair_by): once each
                                     fairness key (FAIR_BY_KEYS) with jobs waiting on its
                                     list, plus FAIR_SHARED_ENTRY; the claim takes the
                                     next entry at the right, one job a turn, and puts it
                                     back at the left. A key whose list was empty joins
                                     (enqueue, fail: release and reaper, promoter,
                                     dead-letter requeue); the claim removes a key whose
                                     list it empties, and the ring with its last key.
    jobs:{type}:fair:q:<key>  LIST   ids of the jobs of fairness key <key> enqueued while
                                     fair share was on, pushed and taken as `queue` (and,
                                     like it, maybe holding an expired or cancelled job's
                                     id, which the claim drops). A job keeps its key (job
                                     hash field `fair_key`, set at the start, or at the
                                     enqueue of a scheduled job): released, retried,
                                     reaped or requeued, it comes back here (RPUSH; a
                                     requeue LPUSHes).
    jobs:{type}:fair:since    HASH   fairness key -> the Redis time (ms) since which it has
                                     had no start: written when it joins the ring and each
                                     time the claim serves it, deleted with it. HLEN is the
                                     number of keys waiting; the exporter reads the ages.
    jobs:{type}:fair:r:<key>  ZSET   job id -> start time (ms) of the jobs the claim started
                                     from that key's list while max_running_per_key is set;
                                     an entry counts while the job holds a lease (the
                                     claim drops the rest when it looks), so a crashed
                                     worker's slots come back with its leases. Expires a
                                     day after its last start.
    jobs:{type}:rate          STRING the rate limit's state: the theoretical arrival time
                                     (ms, Redis' clock, "%.3f") of the next start (a
                                     GCRA); written by the claims that start jobs while
                                     a rate is set, expires once it has passed.
    jobs:{type}:control       STREAM cancel requests of running jobs (queue/cancel.py):
                                     fields `job` (the id) and `reason`, written by
                                     lua/queue_cancel.lua, capped with XADD MAXLEN ~
                                     CANCEL_STREAM_MAX; each worker reads it with XREAD
                                     BLOCK from the id current at its start
                                     (worker/cancel_watch.py) and cancels the handler of
                                     a job it runs.
    jobs:{type}:cancels       HASH   pending cancel requests of running jobs: job id -> the
                                     reason (lua/queue_cancel.lua); complete, fail and the
                                     reaper end such a job cancelled and delete its entry.
                                     A hash of its own: the roles that cancel need no HSET
                                     of job hashes.
    jobs:{type}:workers       ZSET   worker id -> last heartbeat (ms)
    jobs:{type}:worker_jobs   HASH   worker id -> its jobs in progress, written with each
                                     heartbeat, removed when it leaves or is pruned with
                                     it (the exporter reads it: no job hash is read)
    jobs:{type}:worker_concurrency HASH worker id -> the most jobs it runs at once, written
                                     and removed with worker_jobs (the console's workers
                                     page and `agentjobs workers` show it)
    jobs:types                SET    every agent type ever enqueued or worked on (written
                                     with a plain SADD by each producer and worker, never
                                     inside a script); the exporter and the operator
                                     tools discover types here (type_registry.py)
Channel: agent:<type>:completed  (PUBLISH reaches every cluster node)
    the message is the job id, published after the job's result is stored, for every
    terminal outcome (succeeded, failed, dead-lettered, expired, cancelled)
Channel: agent:<type>:progress  (PUBLISH reaches every cluster node)
    {"job_id": <id>, "at": <Redis ms>, "progress": <the report>}, published by
    queue_progress.lua after it stored the report on the job hash

Queue stats counters (per agent type, each HINCRBY'd only by the script that performs
the transition; so they are exact across any number of processes):
    enqueued       a job entered the queue (enqueue, or a requeue from the dead letters)
    started        an attempt began (a claim; a crashed attempt was started too)
    completed      a job succeeded (terminal)
    failed         a job ended failed (terminal): every dead-lettered job, plus jobs whose
                   handler raised a non-retryable error (those are not dead-lettered)
    retried        a failed or crashed attempt was scheduled for another try
    dead_lettered  a job used its last attempt and moved to the dead-letter list
    expired        a job passed its TTL unfinished (terminal; not counted in failed)
    cancelled      a job was cancelled (terminal): while it waited (queue_cancel), or
                   when its running attempt ended after a cancel request (complete,
                   fail, reaper)
    So enqueued == completed + failed + expired + cancelled + jobs still live (queued,
    delayed, in progress), and failed >= dead_lettered.
    held_back_rate, held_back_max_running
                   job starts a claim could have made but the type's rate (or its
                   max_running) held back (queue/limits.py): each claim adds the jobs it
                   asked for and did not start, so a job that waits through several
                   claims counts at each. Written only while the type has limits.
    held_back_max_running_per_key
                   job starts held back because their fairness key (fair share) was at
                   its max_running_per_key, counted as the two above.
    leveled        jobs enqueued at priority high or low (queue/priority.py); not
                   exported: the claim reads the levels' lists only once it is above 0,
                   so a type that uses only "normal" pays no command for them.
Histograms in the same hash, each observed once per successful completion (see
STATS_HISTOGRAMS): <name>_le:<bound> (NON-cumulative bucket), <name>_sum, <name>_count.
Exemplars beside them: <name>_ex:<bound> (EXEMPLAR_FIELD_FORMAT), one recent job of that
bucket, from its stored traceparent (queue_complete); one field per bucket, so bounded.
The exporter serves them on the OpenMetrics page.
Failed attempts by exception class, in the same hash (written by queue_fail):
    error:<class>  attempts that ended in an error (retried, dead-lettered or failed for
                   good; not a release) whose exception was of that class; at most
                   MAX_ERROR_CLASSES classes get a field, the first ones seen, then
                   error:other counts the rest (a class's field never moves, so each
                   series only ever rises). Summed, they equal retried + failed.
    error_classes  how many error:<class> fields exist (other excluded): the cap's count
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

__all__ = [
    "ARRIVAL_BUCKET_MS",
    "COMPLETION_PATTERN",
    "DEFAULT_LATENCY_BUCKETS",
    "ERROR_CLASSES_FIELD",
    "ERROR_CLASS_PREFIX",
    "EXEMPLAR_FIELD_FORMAT",
    "EXPIRY_BUCKET_MS",
    "FAIR_BY_KEYS",
    "FAIR_SHARED_ENTRY",
    "HISTORY_DEPTHS",
    "HISTORY_MINUTES",
    "INDEX_SEGMENT",
    "LATENCY_COUNT_FIELD",
    "LATENCY_SUM_FIELD",
    "MAX_ERROR_CLASSES",
    "OTHER_ERROR_CLASS",
    "PRIORITY_LEVELS",
    "PROGRESS_PATTERN",
    "QUEUE_PREFIX",
    "SHARED_OWNER_BUCKET",
    "STATS_COUNTERS",
    "STATS_HISTOGRAMS",
    "STORE_PREFIX",
    "WAKE_MARKER",
    "QueueKeys",
    "StoreKeys",
    "completion_channel",
    "histogram_bucket_field",
    "histogram_count_field",
    "histogram_exemplar_field",
    "histogram_sum_field",
    "latency_bucket_field",
    "progress_channel",
    "queue_key_type",
]

STORE_PREFIX = "agentjobs"
QUEUE_PREFIX = "jobs"
SHARED_OWNER_BUCKET = "__shared__"
INDEX_SEGMENT = "_idx:"

# The stats hash's counters (the module docstring says what each counts).
STATS_COUNTERS = ("enqueued", "started", "completed", "failed", "retried", "dead_lettered",
                  "expired", "held_back_rate", "held_back_max_running", "cancelled",
                  "held_back_max_running_per_key")  # fmt: skip
LATENCY_SUM_FIELD = "latency_sum"
LATENCY_COUNT_FIELD = "latency_count"

# The histograms of the stats hash, by name: `latency` enqueue -> completion (the whole
# life, retries and backoffs included); `wait` the succeeding attempt's becoming due
# (enqueued, or the due time of its retry) -> its start: time spent waiting for a
# worker; `run` that attempt's start -> completion: time in the handler. All three use
# the queue's latency buckets and are observed together (queue_complete.lua).
STATS_HISTOGRAMS = ("latency", "wait", "run")

ERROR_CLASS_PREFIX = "error:"
ERROR_CLASSES_FIELD = "error_classes"
OTHER_ERROR_CLASS = "other"
"""The class every failed attempt is counted under once MAX_ERROR_CLASSES are taken."""
MAX_ERROR_CLASSES = 20
"""Exception classes with a counter of their own per agent type (a bounded label)."""

COMPLETION_PATTERN = "agent:*:completed"
PROGRESS_PATTERN = "agent:*:progress"

HISTORY_MINUTES = 1440
"""Minutes of samples the history stream keeps (a day)."""
HISTORY_DEPTHS = ("queued", "running", "delayed", "dead")
"""The depths each history sample holds beside STATS_COUNTERS (as JobQueue.stats reads
them: queued counts the packed jobs and those waiting with a job hash)."""

PRIORITY_LEVELS = ("high", "normal", "low")
"""The priority levels, highest first (queue/priority.py); "normal" is the default."""

FAIR_BY_KEYS = ("tenant", "orchestrator_id", "session_id")
"""The payload fields fair share can go by (queue/limits.py; None, or "none", is plain
FIFO), in the order the producer sends their values and the enqueue script reads them
(queue/payload.py fairness_values, lua/include/fair_keys.lua): here, data only, so that
the exporter names them without importing the queue."""

FAIR_SHARED_ENTRY = ""
"""The entry of fair share's ring that stands for the `queue` list's turn (a fairness key
is never empty): jobs without the key wait there (a job with one keeps it through its
retries, a release, the reaper and a requeue: job hash field `fair_key`)."""

WAKE_MARKER = "^wake"
"""The wake marker of the layout's `queue:high`: never a job id (those start with a letter
or digit)."""

EXPIRY_BUCKET_MS = 10_000
"""Width of one expiry bucket of `queued`: a job waiting unclaimed expires at most this
much (plus a cleanup interval) after its deadline; a claim expires it on the spot."""

ARRIVAL_BUCKET_MS = 1_000
"""Resolution of the oldest waiting job's age for jobs in `queued`."""

# Default latency buckets (seconds): agent jobs take from well under a second to
# several minutes. Configurable per queue; the exporter discovers the bounds from
# the hash fields, so a change of buckets needs no exporter change.
DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip


def latency_bucket_field(upper_bound: float) -> str:
    """Stats-hash field of latency bucket `upper_bound` ("+Inf" for the last)."""
    return histogram_bucket_field("latency", upper_bound)


def histogram_bucket_field(histogram: str, upper_bound: float) -> str:
    """Stats-hash field of bucket `upper_bound` of STATS_HISTOGRAMS `histogram`
    (`wait_le:0.5`). NON-cumulative: an observation increments only the smallest bound
    >= its value (one HINCRBY); the exporter sums them into Prometheus' `le` buckets."""
    return f"{histogram}_le:{_format_bound(upper_bound)}"


EXEMPLAR_FIELD_FORMAT = "<trace id> <seconds> <unix ms>"
"""An exemplar field's value: the W3C trace id (32 lowercase hex digits) of a job
observed in the bucket, the observed value in seconds and the time in ms, one space apart."""


def histogram_exemplar_field(histogram: str, upper_bound: float) -> str:
    """Stats-hash field of the exemplar of bucket `upper_bound` of `histogram`
    (`latency_ex:0.5`): the last job observed in it (EXEMPLAR_FIELD_FORMAT)."""
    return f"{histogram}_ex:{_format_bound(upper_bound)}"


def histogram_sum_field(histogram: str) -> str:
    return f"{histogram}_sum"


def histogram_count_field(histogram: str) -> str:
    return f"{histogram}_count"


def _format_bound(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def queue_key_type(key: str, prefix: str = QUEUE_PREFIX) -> str | None:
    """The type (as Redis TYPE names it) the queue keeps at `key`, or None for a key
    that is not a queue key: what a corrupt-state report compares against."""
    head = prefix + ":{"
    close = key.find("}:", len(head)) if key.startswith(head) else -1
    if close < 0:
        return None
    rest = key[close + 2 :]
    if rest.startswith("job:"):
        return "hash"
    if rest.startswith("result:"):
        return "string"
    if rest.startswith(("expiring:", "fair:q:")):
        return "list"
    if rest.startswith("fair:r:"):
        return "zset"
    return _QUEUE_KEY_TYPES.get(rest)


def completion_channel(agent_type: str) -> str:
    return f"agent:{agent_type}:completed"


def progress_channel(agent_type: str) -> str:
    """Where a running job's progress reports of `agent_type` are published."""
    return f"agent:{agent_type}:progress"


@dataclass(frozen=True, slots=True)
class StoreKeys:
    """Keys of one agent's JobStore namespace."""

    agent: str
    prefix: str = STORE_PREFIX

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.agent}}}"

    def record(self, job_id: str) -> str:
        return f"{self.base}:{job_id}"

    def scan_pattern(self) -> str:
        # Braces are not glob-special in Redis MATCH; the index keys are excluded
        # by the caller with is_record_key().
        return f"{self.base}:*"

    def index(self, owner_bucket: str) -> str:
        return f"{self.base}:{INDEX_SEGMENT}{owner_bucket}"

    def index_scan_pattern(self) -> str:
        return f"{self.base}:{INDEX_SEGMENT}*"

    def is_record_key(self, key: str) -> bool:
        # A job id starts with a letter or digit; the index segment starts with "_".
        return (
            key.startswith(self.base + ":")
            and key[len(self.base) + 1 : len(self.base) + 2].isalnum()
        )

    def bucket_of(self, index_key: str) -> str:
        return index_key[len(self.base) + 1 + len(INDEX_SEGMENT) :]

    def job_id_of(self, key: str) -> str:
        return key[len(self.base) + 1 :]


class _Key:
    """A fixed key of an agent type's queue, read as an attribute of QueueKeys
    (`keys.stats` is `<prefix>:{<type>}:stats`), and the type Redis keeps it as."""

    def __init__(self, suffix: str, redis_type: str) -> None:
        self.suffix = suffix
        self.redis_type = redis_type

    @overload
    def __get__(self, keys: None, owner: type[QueueKeys]) -> _Key: ...

    @overload
    def __get__(self, keys: QueueKeys, owner: type[QueueKeys]) -> str: ...

    def __get__(self, keys: QueueKeys | None, owner: type[QueueKeys]) -> _Key | str:
        return self if keys is None else f"{keys.base}:{self.suffix}"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Keys of one agent type's queue."""

    agent_type: str
    prefix: str = QUEUE_PREFIX

    # Its fixed keys, in the layout's order (the module docstring says what each holds).
    queue = _Key("queue", "list")
    queued = _Key("queued", "hash")
    waiting = _Key("waiting", "zset")
    arrivals = _Key("arrivals", "zset")
    arrived = _Key("arrived", "hash")
    deadline_mark = _Key("deadline_mark", "string")
    expiring = _Key("expiring", "zset")
    processing = _Key("processing", "list")
    leases = _Key("leases", "zset")
    delayed = _Key("delayed", "zset")
    expiry = _Key("expiry", "zset")
    dead = _Key("dead", "list")
    failed = _Key("failed", "list")
    stats = _Key("stats", "hash")
    paused = _Key("paused", "string")
    history = _Key("history", "stream")
    limits = _Key("limits", "hash")
    fair_ring = _Key("fair", "list")  # fair share's ring of fairness keys with jobs waiting
    fair_since = _Key("fair:since", "hash")  # since when each key in the ring has waited (ms)
    rate = _Key("rate", "string")
    control = _Key("control", "stream")
    cancels = _Key("cancels", "hash")
    workers = _Key("workers", "zset")
    worker_jobs = _Key("worker_jobs", "hash")
    worker_concurrency = _Key("worker_concurrency", "hash")

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.agent_type}}}"

    def level_queue(self, priority: str) -> str:
        """The list the jobs of `priority` wait on (PRIORITY_LEVELS): `queue` for normal."""
        return self.queue if priority == "normal" else f"{self.base}:queue:{priority}"

    @property
    def level_queues(self) -> tuple[str, str]:
        """The high and low lists, in that order (the keys the scripts append)."""
        return (f"{self.base}:queue:high", f"{self.base}:queue:low")

    def expiring_bucket(self, expires_at_ms: int) -> str:
        """The expiry bucket list of a job of `queued` whose deadline is `expires_at_ms`."""
        return f"{self.base}:expiring:{expires_at_ms - expires_at_ms % EXPIRY_BUCKET_MS}"

    def fair_list(self, key: str) -> str:
        """The list fairness key `key`'s jobs wait on (the claim derives it from the ring)."""
        return f"{self.base}:fair:q:{key}"

    def fair_running(self, key: str) -> str:
        """The started jobs of fairness key `key` max_running_per_key counts."""
        return f"{self.base}:fair:r:{key}"

    def job(self, job_id: str) -> str:
        return f"{self.base}:job:{job_id}"

    def take(self, token: str) -> str:
        """A take's marker, named by the first lease token of its claim call."""
        return f"{self.base}:take:{token}"

    def result(self, job_id: str) -> str:
        return f"{self.base}:result:{job_id}"

    @property
    def channel(self) -> str:
        return completion_channel(self.agent_type)

    @property
    def progress_channel(self) -> str:
        return progress_channel(self.agent_type)

    @staticmethod
    def types_key(prefix: str = QUEUE_PREFIX) -> str:
        return f"{prefix}:types"


# What a corrupt-state report compares a key's TYPE against: each fixed key's type, and
# the priority levels' lists (QueueKeys.level_queue).
_QUEUE_KEY_TYPES = {"queue:high": "list", "queue:low": "list"} | {
    key.suffix: key.redis_type for key in vars(QueueKeys).values() if isinstance(key, _Key)
}
