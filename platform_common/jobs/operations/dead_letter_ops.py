"""`dead` and `failed` list/requeue/purge: the jobs kept on one of an agent type's two
lists (KeptList) listed, selected (ids, all, or by error) and requeued or purged in
batches, with a dry run, reporting what was really done. Below, "letter" is an entry of
either list, and "dead-lettered" its time of joining it.

Listing and matching read each letter's id, attempts, error and time (LRANGE + HMGET
pages), never its payload or history: matching an error over 100k letters must not move
every payload. A field that does not parse is listed as stored (stored.py), so one
damaged letter never hides the others. Requeue and purge go through the DeadLetters
API, BATCH ids per call, and count what its scripts say became of each letter.

A selection remembers its moment, `as_of` (the list's own clock): an action on it
touches only letters dead-lettered no later, so letters that arrive between the count
an operator confirmed and the action are left alone, and a letter requeued and
dead-lettered again meanwhile is a new one. A selection of every letter also remembers
the newest letter by id, `newest`, which tells apart letters of the same millisecond."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ..errors import ValidationError
from ..keys import QueueKeys
from ..queue import JobQueue
from ..queue.dead_letters import BATCH, ActedOn, DeadLetters, wire
from ..status import QueueState
from .session import PAGE, read, read_undecoded, redis_now
from .stored import shown_stored, stored_count, stored_id, stored_ms, stored_text

__all__ = [
    "MAX_SCAN",
    "MAX_START",
    "SAMPLE_SIZE",
    "DeadLetterAction",
    "DeadLetterLine",
    "DeadLetterListing",
    "DeadSelection",
    "KeptList",
    "Progress",
    "SelectionKind",
    "list_dead_letters",
    "purge_dead_letters",
    "requeue_dead_letters",
    "select_dead_letters",
]

SAMPLE_SIZE = 10
"""Job ids a selection or an action report names (the count is always exact)."""
MAX_SCAN = 5_000
"""Most dead letters one filtered listing looks at (PAGE at a time): a rare filter over a
100k-long list returns a partial page and where to continue, instead of reading every
letter on each page load."""
MAX_START = 10**16 - 1
"""The largest list position a listing starts at: more than any list Redis can hold,
and LRANGE still takes it (a 20-digit one is a Redis error)."""

Progress = Callable[[int, int], None]
"""Called with (letters handled so far, letters to handle) after each page or batch."""


class KeptList(StrEnum):
    """The two lists of an agent type that keep jobs which ended for good unsuccessfully,
    for an operator to look at, requeue or purge (keys.py: `dead`, `failed`)."""

    DEAD = "dead"
    """Used their last attempt (retries exhausted), or their stored job did not parse."""
    FAILED = "failed"
    """Failed for good without a retry: the handler raised NonRetryableError, or
    returned a result that could not be stored."""

    @property
    def state(self) -> QueueState:
        """The state a job on this list holds (what the scripts check before acting)."""
        return QueueState(self.value)

    @property
    def noun(self) -> str:
        """One entry, as the commands and pages name it."""
        return "dead letter" if self is KeptList.DEAD else "failed job"

    @property
    def nouns(self) -> str:
        return self.noun + "s"

    @property
    def ended(self) -> str:
        """What happened to an entry when it joined the list, as a past participle."""
        return "dead-lettered" if self is KeptList.DEAD else "failed"

    def key(self, keys: QueueKeys) -> str:
        """The list's key of one agent type."""
        return keys.dead if self is KeptList.DEAD else keys.failed

    def of(self, queue: JobQueue) -> DeadLetters:
        """The queue's API of this list (JobQueue.dead_letters or .failed_jobs)."""
        return queue.dead_letters if self is KeptList.DEAD else queue.failed_jobs


@dataclass(frozen=True, slots=True)
class DeadLetterLine:
    """One dead letter as a listing shows it (no payload, no history: `dead show`)."""

    job_id: str
    """As stored: bytes that are not UTF-8 as surrogate escapes (stored.readable shows
    them as \\xNN; an action given this id acts on those bytes)."""
    attempts: int | None
    """0 when absent; None when it does not parse (then in `unparsed`)."""
    last_error: str
    dead_at: float | None
    """Seconds since the epoch (Redis time) when it was dead-lettered; None when absent
    or when it does not parse (then in `unparsed`)."""
    unparsed: dict[str, str] = field(default_factory=dict)
    """Stored fields that do not parse ("attempts", "finished_at"), as their text (cut
    to stored.MAX_SHOWN_STORED characters): a listing shows them as stored."""


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
    kept: KeptList = KeptList.DEAD

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
    as_of: int | None = None
    """Redis ms: the action touches only letters dead-lettered no later (the newest
    selected letter's time). None: any time (no selected letter's time parses)."""
    newest: str | None = None
    """ALL and ERROR_MATCHES: the list's newest letter when selected. Acting on every
    letter stops there; matching again (the console's act) leaves out the matches
    above it. Either way only while it is still on the list (then `as_of` decides)."""
    newer: int = 0
    """Matches found above `newest` when matching again: dead-lettered after the
    selection, left out (counted in the action's report)."""
    kept: KeptList = KeptList.DEAD
    """The list selected from (and acted on)."""


@dataclass(frozen=True, slots=True)
class DeadLetterAction:
    """What a requeue or a purge did (or, on a dry run, would do)."""

    agent_type: str
    action: str
    """"requeue" or "purge"."""
    kind: SelectionKind
    pattern: str | None
    """The --error-matches expression, if that was the selection."""
    dry_run: bool
    selected: int
    """Dead letters the selection held (the count an operator confirmed)."""
    done: int
    """Dead letters really requeued or purged, as Redis reported them (0 on a dry run):
    fewer than `selected` when some stopped being dead letters meanwhile."""
    not_dead: tuple[str, ...]
    """Ids asked for that were not dead letters."""
    sample: tuple[str, ...]
    """The first SAMPLE_SIZE ids acted on (on a dry run: that would be)."""
    gone: int = 0
    """Selected letters that were no longer the dead letters selected when acted on
    (requeued, purged or expired meanwhile): `selected` - `done`, never below 0."""
    newer: int = 0
    """Dead letters the action found dead-lettered after the selection's moment and left
    alone (for ALL: the letters left on the list when it ended)."""
    as_of: int | None = None
    """The selection's moment (Redis ms): nothing dead-lettered later was touched."""
    kept: KeptList = KeptList.DEAD


async def list_dead_letters(
    queue: JobQueue,
    agent_type: str,
    *,
    limit: int = 20,
    error_matches: str | None = None,
    start: int = 0,
    max_scan: int = MAX_SCAN,
    kept: KeptList = KeptList.DEAD,
) -> DeadLetterListing:
    """The newest `limit` dead letters (whose last error matches `error_matches`, a
    regular expression searched anywhere in it), read PAGE at a time, from position
    `start` (0 = the newest; a next page starts at `next_start`), of the list `kept`.

    A filtered listing looks at `max_scan` letters at most: fewer matches than `limit`
    then come back with `scan_limited` set, and the next call continues the search from
    `next_start`. Without a filter every letter read is listed, so `limit` bounds it."""
    if limit < 1:
        raise ValidationError("limit", f"must be at least 1, got {limit}")
    if not 0 <= start <= MAX_START:
        raise ValidationError("start", f"a list position from 0 to {MAX_START}, got {start}")
    if max_scan < 1:
        raise ValidationError("max_scan", f"must be at least 1, got {max_scan}")
    pattern = _compile(error_matches)
    keys = await queue.connection.seen_keys(agent_type)
    (total,) = await read(queue, [("LLEN", kept.key(keys))])
    found: list[DeadLetterLine] = []
    scanned = 0
    complete = False
    limited = False
    while len(found) < limit:
        if pattern is not None and scanned >= max_scan:
            limited = True
            break
        wanted = min(PAGE, max_scan - scanned) if pattern else min(PAGE, limit - len(found))
        lines = await _page(queue, keys, kept, start + scanned, wanted)
        if lines is None:
            complete = True
            break
        for index, letter in enumerate(lines):
            line = letter.line
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
        agent_type, int(total), scanned, complete, tuple(found), start, limited, kept
    )


async def select_dead_letters(
    queue: JobQueue,
    agent_type: str,
    *,
    job_ids: Sequence[str] = (),
    every: bool = False,
    error_matches: str | None = None,
    on_scan: Progress | None = None,
    newest: str | None = None,
    kept: KeptList = KeptList.DEAD,
) -> DeadSelection:
    """Exactly one of: these `job_ids` (those that are dead letters), `every` dead letter,
    or those whose last error matches `error_matches` (a scan of the list, PAGE at a time,
    reported to `on_scan`), of the list `kept`. Reads only: nothing changes until an
    action runs.

    `newest` (matching again a selection made before): the matches above that letter,
    when it is still on the list, are left out and counted in `newer`; the selection's
    `as_of` is then the caller's to set (dataclasses.replace)."""
    given = sum((bool(job_ids), every, error_matches is not None))
    if given != 1:
        raise ValidationError("selection", "give exactly one of --id, --all, --error-matches")
    keys = await queue.connection.seen_keys(agent_type)
    kept_key = kept.key(keys)
    if every:
        head, total = await read_undecoded(queue, [("LRANGE", kept_key, 0, 0), ("LLEN", kept_key)])
        if not head:
            return DeadSelection(agent_type, SelectionKind.ALL, 0, (), kept=kept)
        head_id = stored_id(head[0])
        (ended,) = await read_undecoded(queue, [("HGET", wire(keys.job(head_id)), "finished_at")])
        as_of = stored_ms(ended)
        if as_of is None:
            as_of = await _now_ms(queue)
        return DeadSelection(
            agent_type, SelectionKind.ALL, int(total), (), as_of=as_of, newest=head_id,
            kept=kept,
        )  # fmt: skip
    if job_ids:
        unique = list(dict.fromkeys(job_ids))
        dead: list[str] = []
        times: list[int] = []
        for start in range(0, len(unique), PAGE):
            chunk = unique[start : start + PAGE]
            replies = await read_undecoded(
                queue, [("HMGET", wire(keys.job(j)), "state", "finished_at") for j in chunk]
            )
            for job_id, (state, ended) in zip(chunk, replies, strict=True):
                if state == kept.state.encode():
                    dead.append(job_id)
                    times += [ms] if (ms := stored_ms(ended)) is not None else []
        not_dead = tuple(j for j in unique if j not in set(dead))
        return DeadSelection(
            agent_type, SelectionKind.IDS, len(dead), tuple(dead), not_dead,
            as_of=max(times, default=None), kept=kept,
        )  # fmt: skip
    pattern = _compile(error_matches)
    assert pattern is not None
    (total,) = await read(queue, [("LLEN", kept_key)])
    matched: list[str] = []
    scanned = 0
    head_ms: int | None = None
    first: str | None = None
    passed_newest = newest is None
    above = 0
    while (page := await _page(queue, keys, kept, scanned, PAGE)) is not None:
        if first is None:
            first, head_ms = page[0].job_id, page[0].ended_ms
        scanned += len(page)
        for letter in page:
            if letter.job_id == newest and not passed_newest:
                # The matches above it arrived after the selection this one repeats.
                above, passed_newest = len(matched), True
                matched.clear()
            if letter.line is not None and pattern.search(letter.line.last_error):
                matched.append(letter.job_id)
        if on_scan is not None:
            on_scan(scanned, max(scanned, int(total)))
    matched.reverse()  # oldest first, as a requeue of all of them would go
    as_of = head_ms if head_ms is not None or first is None else await _now_ms(queue)
    return DeadSelection(
        agent_type, SelectionKind.ERROR_MATCHES, len(matched), tuple(matched),
        pattern=pattern.pattern, as_of=as_of, newest=first, newer=above, kept=kept,
    )  # fmt: skip


async def requeue_dead_letters(
    queue: JobQueue,
    selection: DeadSelection,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> DeadLetterAction:
    """Requeue the selection (fresh attempts and TTL), BATCH per call, oldest first: only
    letters dead-lettered no later than its `as_of`."""
    return await _act(queue, "requeue", selection, dry_run, progress)


async def purge_dead_letters(
    queue: JobQueue,
    selection: DeadSelection,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> DeadLetterAction:
    """Delete the selection for good (record and result), BATCH per call, oldest first:
    only letters dead-lettered no later than its `as_of`."""
    return await _act(queue, "purge", selection, dry_run, progress)


Each = Callable[[str, Sequence[str]], Awaitable[ActedOn]]


async def _act(
    queue: JobQueue,
    action: str,
    selection: DeadSelection,
    dry_run: bool,
    progress: Progress | None,
) -> DeadLetterAction:
    kept_key = selection.kept.key(await queue.connection.seen_keys(selection.agent_type))
    if dry_run:
        sample = list(selection.job_ids[:SAMPLE_SIZE])
        if selection.kind == SelectionKind.ALL:
            (raw,) = await read_undecoded(queue, [("LRANGE", kept_key, -SAMPLE_SIZE, -1)])
            sample = [stored_id(r) for r in reversed(raw)]
        return _report(action, selection, True, ActedOn(), sample, 0)
    letters = selection.kept.of(queue)
    run = letters.requeue_each if action == "requeue" else letters.purge_each

    async def each(agent_type: str, job_ids: Sequence[str]) -> ActedOn:
        return await run(agent_type, job_ids, as_of=selection.as_of)

    if selection.kind == SelectionKind.ALL:
        acted = await _oldest_first(queue, kept_key, selection, each, progress)
        # What the walk left is what was dead-lettered after the moment.
        (left,) = await read(queue, [("LLEN", kept_key)])
        newer = int(left)
    else:
        acted = ActedOn()
        for start in range(0, len(selection.job_ids), BATCH):
            acted += await each(selection.agent_type, selection.job_ids[start : start + BATCH])
            if progress is not None:
                progress(min(start + BATCH, selection.count), selection.count)
        newer = selection.newer + len(acted.newer)
    return _report(action, selection, False, acted, list(acted.done[:SAMPLE_SIZE]), newer)


async def _oldest_first(
    queue: JobQueue, kept_key: str, selection: DeadSelection, each: Each, progress: Progress | None
) -> ActedOn:
    """Every letter of the list from its oldest end up to `newest` (while it is still
    there) or the first one dead-lettered after `as_of`, BATCH per call; never more
    than the count selected (and confirmed)."""
    acted = ActedOn()
    while len(acted.done) < selection.count:
        size = min(BATCH, selection.count - len(acted.done))
        # Re-read for each batch: the oldest `size`, at the list's right end.
        (raw,) = await read_undecoded(queue, [("LRANGE", kept_key, -size, -1)])
        window = [stored_id(r) for r in reversed(raw)]
        if not window:
            break
        newest = selection.newest
        last = newest is not None and newest in window
        if newest is not None and last:
            window = window[: window.index(newest) + 1]
        batch = await each(selection.agent_type, window)
        acted += batch
        if progress is not None:
            progress(min(len(acted.done) + len(acted.gone), selection.count), selection.count)
        if last or batch.newer:
            break  # the rest of the list was dead-lettered after the moment
    return acted


def _report(
    action: str,
    selection: DeadSelection,
    dry_run: bool,
    acted: ActedOn,
    sample: list[str],
    newer: int,
) -> DeadLetterAction:
    done = len(acted.done)
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
        gone=0 if dry_run else max(0, selection.count - done),
        newer=newer,
        as_of=selection.as_of,
        kept=selection.kept,
    )


@dataclass(frozen=True, slots=True)
class _Letter:
    job_id: str
    line: DeadLetterLine | None
    """None when its record is gone (purged or expired meanwhile)."""
    ended_ms: int | None
    """Its dead-lettered time as stored, Redis ms (None: absent or does not parse)."""


async def _page(
    queue: JobQueue, keys: QueueKeys, kept: KeptList, start: int, count: int
) -> list[_Letter] | None:
    """`count` letters of `kept` from position `start`; None when the list has no entry
    there. Read undecoded: an id or a field that is not UTF-8 is shown, not an error."""
    (raw_ids,) = await read_undecoded(queue, [("LRANGE", kept.key(keys), start, start + count - 1)])
    if not raw_ids:
        return None
    job_ids = [stored_id(r) for r in raw_ids]
    replies = await read_undecoded(
        queue,
        [("HMGET", wire(keys.job(j)), "attempts", "last_error", "finished_at") for j in job_ids],
    )
    letters: list[_Letter] = []
    for job_id, (attempts, error, ended) in zip(job_ids, replies, strict=True):
        if attempts is None and error is None and ended is None:
            letters.append(_Letter(job_id, None, None))
            continue
        unparsed: dict[str, str] = {}
        count_ = 0 if attempts in (None, b"") else stored_count(attempts)
        if count_ is None:
            unparsed["attempts"] = shown_stored(attempts)
        ms = stored_ms(ended)
        if ms is None and ended not in (None, b""):
            unparsed["finished_at"] = shown_stored(ended)
        dead_at = None if ms is None else ms / 1000
        line = DeadLetterLine(job_id, count_, stored_text(error), dead_at, unparsed)
        letters.append(_Letter(job_id, line, ms))
    return letters


async def _now_ms(queue: JobQueue) -> int:
    return int(await redis_now(queue) * 1000)


def _compile(expression: str | None) -> re.Pattern[str] | None:
    if expression is None:
        return None
    try:
        return re.compile(expression)
    except re.error as exc:
        raise ValidationError("--error-matches", f"not a regular expression: {exc}") from None
