"""The history the workers record in Redis (keys.py `history`: one sample a minute of
each agent type's counters and depths, the last day), read for the console's charts and
`agentjobs info` when no Prometheus is set.

A minute's count is the difference of two samples a minute apart (the newest minute's:
of its sample and the counters read now). A missing sample, a counter that does not
parse, or one lower than a minute before (its stats hash was recreated) leaves that
minute a gap: never a negative or invented count. An entry that does not parse, a
history key of another type, or one this Redis user may not read is a gap too, logged
once per agent type and cause by the reader that met it."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import ResponseError

from ..keys import HISTORY_MINUTES, STATS_COUNTERS
from ..queue import JobQueue
from .history import Minute
from .overview import Counts, Recent
from .session import replies_undecoded

__all__ = ["HistoryReader", "Sample", "chart_minutes", "window_counts", "window_minutes"]

log = logging.getLogger("platform_common.jobs.operations")

_COUNTERS = frozenset(STATS_COUNTERS)


@dataclass(frozen=True, slots=True)
class Sample:
    """One minute's sample of one agent type's counters."""

    minute: int
    """The minute: its start in seconds, divided by 60."""
    at: float
    """When it was read (Redis time, seconds), within its minute."""
    counters: Mapping[str, int]
    """Those of keys.STATS_COUNTERS it holds as integers (one that did not parse when
    sampled is missing)."""

    def counts(self) -> Counts | None:
        """Enqueued, completed and failed; None if one of them is missing."""
        try:
            return Counts(
                self.counters["enqueued"], self.counters["completed"], self.counters["failed"]
            )
        except KeyError:
            return None


class HistoryReader:
    """Reads the recorded history; logs each problem once per agent type and cause for
    as long as it lives (one per console, one per `info` run)."""

    def __init__(self) -> None:
        self._reported: set[tuple[str, str]] = set()

    async def read(
        self, queue: JobQueue, agent_types: Sequence[str], first: int, last: int
    ) -> dict[str, dict[int, Sample]]:
        """Each type's samples of minutes `first` to `last` (indexes, as Sample.minute),
        by minute: one XRANGE per type in one pipeline, at most HISTORY_MINUTES entries
        each. Bytes are read as stored, so an entry that is not UTF-8 is one gap."""
        count = min(HISTORY_MINUTES, last - first + 1)
        commands = [
            ("XRANGE", queue.connection.keys(t).history, first * 60_000, f"{last * 60_000}-0",
             "COUNT", max(1, count))
            for t in agent_types
        ]  # fmt: skip
        if not commands:
            return {}
        replies = await replies_undecoded(queue, commands)
        history: dict[str, dict[int, Sample]] = {}
        for agent_type, reply in zip(agent_types, replies, strict=True):
            samples: dict[int, Sample] = {}
            if isinstance(reply, ResponseError):
                # WRONGTYPE, or NOPERM for a user whose ACL predates the history.
                self._report(agent_type, "unreadable", f"its history cannot be read: {reply}")
            elif isinstance(reply, Exception):
                raise reply
            else:
                for entry in reply:
                    sample = _parsed(entry)
                    if sample is None:
                        problem = f"a history entry does not parse: {entry!r:.200}"
                        self._report(agent_type, "malformed", problem)
                    else:
                        samples[sample.minute] = sample
            history[agent_type] = samples
        return history

    def _report(self, agent_type: str, cause: str, problem: str) -> None:
        if (agent_type, cause) not in self._reported:
            self._reported.add((agent_type, cause))
            log.warning("history of agent type %s: %s; shown as a gap", agent_type, problem)


def _parsed(entry: object) -> Sample | None:
    """A stream entry [id, [field, value, ...]] as the history script writes it, else None."""
    try:
        entry_id, flat = cast(tuple[Any, Any], entry)
        ms, _, sequence = bytes(entry_id).decode("ascii").partition("-")
        # redis-py parses an entry's fields into a dict; a raw reply is a flat list.
        fields = (
            dict(flat) if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2], strict=True))
        )
        at = int(fields[b"at"]) / 1000
    except (TypeError, ValueError, KeyError, UnicodeDecodeError):
        return None
    if not ms.isdigit() or int(ms) % 60_000 or sequence != "0":
        return None
    minute = int(ms) // 60_000
    if not minute * 60 <= at < minute * 60 + 60:
        return None
    counters = {}
    for field, value in fields.items():
        name = field.decode("utf-8", "replace")
        if name in _COUNTERS:
            try:
                counters[name] = int(value)
            except ValueError:
                continue  # that counter's gap
    return Sample(minute, at, counters)


def _increase(before: Counts | None, after: Counts | None) -> Counts | None:
    """after - before, or None when either is unknown or a counter went down (reset)."""
    if before is None or after is None:
        return None
    deltas = (
        after.enqueued - before.enqueued,
        after.completed - before.completed,
        after.failed - before.failed,
    )
    if min(deltas) < 0:
        return None
    return Counts(*deltas)


def chart_minutes(
    samples: Mapping[int, Sample], live: Counts | None, first: int, last: int
) -> tuple[Minute, ...]:
    """Minutes `first` to `last` (the current one), oldest first: each the increase from
    its sample to the next minute's (the current minute's: to `live`, the counters read
    now)."""
    shown = []
    for index in range(first, last + 1):
        start = samples.get(index)
        end = samples.get(index + 1)
        after = live if index == last else (end.counts() if end else None)
        grown = _increase(start.counts() if start else None, after)
        if grown is None:
            shown.append(Minute(index * 60.0, 0, 0, False))
        else:
            shown.append(Minute(index * 60.0, grown.completed, grown.failed, True))
    return tuple(shown)


def window_counts(
    samples: Mapping[int, Sample], live: Counts, now: float, seconds: float
) -> Recent | None:
    """The counts of about the last `seconds` up to `now`: `live` less the oldest sample
    read within `seconds` plus a minute (samples are a minute apart, so the span is
    `seconds` to a minute more, or shorter when the history is younger: Recent.seconds
    says which); None without such a sample or after a reset."""
    recent = [s for s in samples.values() if now - seconds - 60 <= s.at <= now]
    if not recent:
        return None
    baseline = min(recent, key=lambda s: s.at)
    grown = _increase(baseline.counts(), live)
    if grown is None:
        return None
    return Recent(grown, max(0.0, now - baseline.at))


def window_minutes(now: float, seconds: float) -> tuple[int, int]:
    """The first and last minute window_counts may use (for HistoryReader.read)."""
    return math.floor((now - seconds - 60) / 60), math.floor(now / 60)
