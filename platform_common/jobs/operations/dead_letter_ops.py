"""`dead list/requeue/purge`: dead letters listed, selected (ids, all, or by error) and
requeued or purged in batches, with a dry run, reporting what was really done.

Listing and matching read each letter's id, attempts, error and time (LRANGE + HMGET
pages), never its payload or history: matching an error over 100k letters through
DeadLetters.list would move every payload. Requeue and purge go through the
DeadLetters API, BATCH ids per call, and count what its return values say was done."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..errors import ValidationError
from ..queue import JobQueue
from ..queue.dead_letters import BATCH
from .session import PAGE, read

__all__ = [
    "MAX_SCAN",
    "SAMPLE_SIZE",
    "DeadLetterAction",
    "DeadLetterLine",
    "DeadLetterListing",
    "DeadSelection",
    "Progress",
    "SelectionKind",
    "list_dead_letters",
    "purge_dead_letters",
    "requeue_dead_letters",
    "select_dead_letters",
]

SAMPLE_SIZE = 10
MAX_SCAN = 5_000
"""Most dead letters one filtered listing looks at (PAGE at a time): a rare filter over a
100k-long list returns a partial page and where to continue, instead of reading every
letter on each page load."""
"""Job ids a selection or an action report names (the count is always exact)."""

Progress = Callable[[int, int], None]
"""Called with (letters handled so far, letters to handle) after each page or batch."""


@dataclass(frozen=True, slots=True)
class DeadLetterLine:
    """One dead letter as a listing shows it (no payload, no history: `dead show`)."""

    job_id: str
    attempts: int
    last_error: str
    dead_at: float | None
    """Seconds since the epoch (Redis time) when it was dead-lettered."""


@dataclass(frozen=True, slots=True)
class DeadLetterListing:
    """Dead letters newest first, up to a limit, optionally those whose error matches."""

    agent_type: str
    total: int
    """Dead letters in the list when the listing began."""
    scanned: int
    """Letters looked at from the listing's start to find these (all the rest when
    `complete`)."""
    complete: bool
    """The scan reached the end of the list (nothing more would match)."""
    letters: tuple[DeadLetterLine, ...]
    start: int = 0
    """The list position the listing began at (0 = the newest)."""
    scan_limited: bool = False
    """A filtered scan stopped after `max_scan` letters with fewer than `limit` matches:
    more may match from `next_start` on."""

    @property
    def next_start(self) -> int | None:
        """Where the next page begins (`start` + `scanned`); None at the list's end."""
        return None if self.complete else self.start + self.scanned


class SelectionKind(StrEnum):
    IDS = "ids"
    ALL = "all"
    ERROR_MATCHES = "error-matches"


@dataclass(frozen=True, slots=True)
class DeadSelection:
    """Which dead letters an action is about, decided before anything is changed."""

    agent_type: str
    kind: SelectionKind
    count: int
    """Dead letters selected (for ALL: the list's length when selected)."""
    job_ids: tuple[str, ...]
    """The selected ids, oldest first (empty for ALL: taken from the list as it goes)."""
    not_dead: tuple[str, ...] = ()
    """Ids asked for (IDS) that are not dead letters: left out."""
    pattern: str | None = None
    """The regular expression (ERROR_MATCHES), searched in each last error."""


@dataclass(frozen=True, slots=True)
class DeadLetterAction:
    """What a requeue or a purge did (or, on a dry run, would do)."""

    agent_type: str
    action: str
    """"requeue" or "purge"."""
    kind: SelectionKind
    """How the dead letters were selected."""
    pattern: str | None
    """The --error-matches expression, if that was the selection."""
    dry_run: bool
    selected: int
    """Dead letters the selection held."""
    done: int
    """Dead letters really requeued or purged, as the API reported them (0 on a dry run):
    fewer than `selected` when some stopped being dead letters meanwhile."""
    not_dead: tuple[str, ...]
    """Ids asked for that were not dead letters."""
    sample: tuple[str, ...]
    """The first SAMPLE_SIZE ids acted on (on a dry run: that would be)."""


async def list_dead_letters(
    queue: JobQueue,
    agent_type: str,
    *,
    limit: int = 20,
    error_matches: str | None = None,
    start: int = 0,
    max_scan: int = MAX_SCAN,
) -> DeadLetterListing:
    """The newest `limit` dead letters (whose last error matches `error_matches`, a
    regular expression searched anywhere in it), read PAGE at a time, from position
    `start` (0 = the newest; a next page starts at `next_start`).

    A filtered listing looks at `max_scan` letters at most: fewer matches than `limit`
    then come back with `scan_limited` set, and the next call continues the search from
    `next_start`. Without a filter every letter read is listed, so `limit` bounds it."""
    if limit < 1:
        raise ValidationError("limit", f"must be at least 1, got {limit}")
    if start < 0:
        raise ValidationError("start", f"must be 0 or more, got {start}")
    if max_scan < 1:
        raise ValidationError("max_scan", f"must be at least 1, got {max_scan}")
    pattern = _compile(error_matches)
    keys = queue.connection.known_keys(agent_type)
    (total,) = await read(queue, [("LLEN", keys.dead)])
    found: list[DeadLetterLine] = []
    scanned = 0
    complete = False
    limited = False
    while len(found) < limit:
        if pattern is not None and scanned >= max_scan:
            limited = True
            break
        wanted = min(PAGE, max_scan - scanned) if pattern else min(PAGE, limit - len(found))
        lines = await _lines(queue, agent_type, start + scanned, wanted)
        if lines is None:
            complete = True
            break
        for index, line in enumerate(lines):
            if line is not None and (pattern is None or pattern.search(line.last_error)):
                found.append(line)
                if len(found) == limit:
                    scanned += index + 1
                    break
        else:
            scanned += len(lines)
            if len(lines) < wanted:  # a short page: the list ends here
                complete = True
                break
    return DeadLetterListing(
        agent_type, int(total), scanned, complete, tuple(found), start, limited
    )


async def select_dead_letters(
    queue: JobQueue,
    agent_type: str,
    *,
    job_ids: Sequence[str] = (),
    every: bool = False,
    error_matches: str | None = None,
    on_scan: Progress | None = None,
) -> DeadSelection:
    """Exactly one of: these `job_ids` (those that are dead letters), `every` dead letter,
    or those whose last error matches `error_matches` (a scan of the list, PAGE at a time,
    reported to `on_scan`). Reads only: nothing changes until an action runs."""
    given = sum((bool(job_ids), every, error_matches is not None))
    if given != 1:
        raise ValidationError("selection", "give exactly one of --id, --all, --error-matches")
    keys = queue.connection.known_keys(agent_type)
    if every:
        (total,) = await read(queue, [("LLEN", keys.dead)])
        return DeadSelection(agent_type, SelectionKind.ALL, int(total), ())
    if job_ids:
        unique = list(dict.fromkeys(job_ids))
        dead: list[str] = []
        for start in range(0, len(unique), PAGE):
            chunk = unique[start : start + PAGE]
            states = await read(queue, [("HGET", keys.job(j), "state") for j in chunk])
            dead += [j for j, state in zip(chunk, states, strict=True) if state == "dead"]
        not_dead = tuple(j for j in unique if j not in set(dead))
        return DeadSelection(agent_type, SelectionKind.IDS, len(dead), tuple(dead), not_dead)
    pattern = _compile(error_matches)
    assert pattern is not None
    (total,) = await read(queue, [("LLEN", keys.dead)])
    matched: list[str] = []
    scanned = 0
    while (lines := await _lines(queue, agent_type, scanned, PAGE)) is not None:
        scanned += len(lines)
        matched += [x.job_id for x in lines if x is not None and pattern.search(x.last_error)]
        if on_scan is not None:
            on_scan(scanned, max(scanned, int(total)))
    matched.reverse()  # oldest first, as a requeue of all of them would go
    return DeadSelection(
        agent_type, SelectionKind.ERROR_MATCHES, len(matched), tuple(matched),
        pattern=pattern.pattern,
    )  # fmt: skip


async def requeue_dead_letters(
    queue: JobQueue,
    selection: DeadSelection,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> DeadLetterAction:
    """Requeue the selection (fresh attempts and TTL), BATCH per call, oldest first."""

    async def requeue(job_ids: list[str]) -> tuple[int, list[str]]:
        requeued = await queue.dead_letters.requeue(selection.agent_type, job_ids)
        return len(requeued), requeued

    return await _act(queue, "requeue", selection, requeue, dry_run, progress)


async def purge_dead_letters(
    queue: JobQueue,
    selection: DeadSelection,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> DeadLetterAction:
    """Delete the selection for good (record and result), BATCH per call, oldest first."""

    async def purge(job_ids: list[str]) -> tuple[int, list[str]]:
        # purge() reports a count, not which ids: the sample is the ids it was given.
        return await queue.dead_letters.purge(selection.agent_type, job_ids), job_ids

    return await _act(queue, "purge", selection, purge, dry_run, progress)


Batch = Callable[[list[str]], Any]


async def _act(
    queue: JobQueue,
    action: str,
    selection: DeadSelection,
    run_batch: Batch,
    dry_run: bool,
    progress: Progress | None,
) -> DeadLetterAction:
    keys = queue.connection.known_keys(selection.agent_type)
    sample: list[str] = []
    if dry_run:
        sample = list(selection.job_ids[:SAMPLE_SIZE])
        if selection.kind == SelectionKind.ALL:
            (sample,) = await read(queue, [("LRANGE", keys.dead, -SAMPLE_SIZE, -1)])
            sample.reverse()
        return _report(action, selection, True, 0, sample)
    done = 0
    handled = 0
    while handled < selection.count:
        size = min(BATCH, selection.count - handled)
        if selection.kind == SelectionKind.ALL:
            # The oldest `size` (at the list's right end), re-read for each batch; at most
            # the count that was selected (and confirmed), never letters that arrive after.
            (chunk,) = await read(queue, [("LRANGE", keys.dead, -size, -1)])
            if not chunk:
                break
            chunk.reverse()
        else:
            chunk = list(selection.job_ids[handled : handled + size])
        count, acted = await run_batch(chunk)
        done += count
        handled += size
        sample += acted[: SAMPLE_SIZE - len(sample)]
        if progress is not None:
            progress(handled, selection.count)
    return _report(action, selection, False, done, sample)


def _report(
    action: str, selection: DeadSelection, dry_run: bool, done: int, sample: list[str]
) -> DeadLetterAction:
    return DeadLetterAction(
        agent_type=selection.agent_type,
        action=action,
        kind=selection.kind,
        pattern=selection.pattern,
        dry_run=dry_run,
        selected=selection.count,
        done=done,
        not_dead=selection.not_dead,
        sample=tuple(sample),
    )


async def _lines(
    queue: JobQueue, agent_type: str, start: int, count: int
) -> list[DeadLetterLine | None] | None:
    """`count` letters from position `start` (None where the record is gone meanwhile);
    None when the list has no entry there."""
    keys = queue.connection.keys(agent_type)
    (job_ids,) = await read(queue, [("LRANGE", keys.dead, start, start + count - 1)])
    if not job_ids:
        return None
    replies = await read(
        queue, [("HMGET", keys.job(j), "attempts", "last_error", "finished_at") for j in job_ids]
    )
    lines: list[DeadLetterLine | None] = []
    for job_id, (attempts, error, dead_at) in zip(job_ids, replies, strict=True):
        if attempts is None and error is None and dead_at is None:
            lines.append(None)
        else:
            dead = None if dead_at is None else int(dead_at) / 1000
            lines.append(DeadLetterLine(job_id, int(attempts or 0), error or "", dead))
    return lines


def _compile(expression: str | None) -> re.Pattern[str] | None:
    if expression is None:
        return None
    try:
        return re.compile(expression)
    except re.error as exc:
        raise ValidationError("--error-matches", f"not a regular expression: {exc}") from None
