"""How fair share's keys wait: what the exporter reads for a type whose keys wait, and
what the replies mean (the reads and their cost: docs/monitoring.md).

The queue keeps, per type, the ring's `since` hash (keys.py, `jobs:{type}:fair:since`):
fairness key -> the Redis time (ms) since which that key has waited without a start
(set when the key joins the ring, reset each time the claim serves it, deleted when the
key leaves). So a key's wait is read with plain commands, never from a job or its
payload: TIME, then `HGETALL` of the hash, or `HRANDFIELD` of a sample when many keys
wait; with --fair-key-top, `LLEN` of each key's list.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.metric_catalogue import FAIR_READ_ALL_KEYS, FAIR_SAMPLE_KEYS
from platform_common.jobs.redis.replies import finite_number

from .label_values import capped_label_value

__all__ = [
    "FairShare",
    "backlog_commands",
    "fair_share",
    "samples_keys",
    "since_command",
    "since_values",
]


@dataclass(frozen=True, slots=True)
class FairShare:
    """One type's fairness keys with jobs waiting, as one scrape read them."""

    keys_waiting: int
    """Keys with jobs waiting: HLEN of the since hash, every key counted."""
    oldest_wait_seconds: float | None
    """The longest any key read has waited without a start; None when none was read."""
    median_wait_seconds: float | None
    """The median over the keys read of that wait; None likewise."""
    sampled: bool = False
    """Whether the keys read are a random sample (more than FAIR_READ_ALL_KEYS wait)."""
    top_backlogs: tuple[tuple[str, int], ...] = ()
    """(key as a label value, jobs on its list) of the --fair-key-top largest, largest first."""


def samples_keys(keys_waiting: int) -> bool:
    """Whether a type with `keys_waiting` keys has a random sample of them read."""
    return keys_waiting > FAIR_READ_ALL_KEYS


def since_command(keys: QueueKeys, keys_waiting: int) -> tuple[Any, ...]:
    """The read of the since hash for a type with `keys_waiting` keys: all of it while
    that is at most FAIR_READ_ALL_KEYS, else a random sample of FAIR_SAMPLE_KEYS
    distinct keys (a positive count: no key twice)."""
    if not samples_keys(keys_waiting):
        return ("HGETALL", keys.fair_since)
    return ("HRANDFIELD", keys.fair_since, FAIR_SAMPLE_KEYS, "WITHVALUES")


def since_values(reply: object) -> tuple[dict[str, float], int]:
    """(key -> since ms, malformed count) of `since_command`'s reply: HGETALL's (a flat
    list raw or in RESP2, a dict in RESP3) or HRANDFIELD ... WITHVALUES' (flat in RESP2,
    pairs in RESP3). A value that is no finite number is left out and counted."""
    pairs: list[tuple[object, object]]
    if isinstance(reply, Mapping):
        pairs = list(reply.items())
    elif isinstance(reply, list | tuple) and reply and isinstance(reply[0], list | tuple):
        pairs = [(pair[0], pair[1]) for pair in reply]
    elif isinstance(reply, list | tuple):
        items = iter(reply)  # one shared iterator pairs them
        pairs = list(zip(items, items, strict=False))
    else:
        return {}, 1
    since: dict[str, float] = {}
    malformed = 0
    for raw_key, raw_value in pairs:
        value = finite_number(_text(raw_value))
        if value is None:
            malformed += 1
            continue
        since[_text(raw_key)] = value
    return since, malformed


def backlog_commands(keys: QueueKeys, fair_keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """LLEN of each key's list: its jobs waiting (with a stray id or two of jobs that
    expired or were cancelled while they waited, which the claim drops)."""
    return [("LLEN", keys.fair_list(key)) for key in fair_keys]


def fair_share(
    keys_waiting: int,
    since: Mapping[str, float],
    now_ms: int,
    *,
    sampled: bool,
    backlogs: Mapping[str, int] | None = None,
    top: int = 0,
) -> FairShare:
    """The FairShare of a type: `since` (key -> since ms) read at Redis time `now_ms`;
    `backlogs` (key -> jobs on its list) when read, of which the `top` largest."""
    # A key served after TIME was read has a since past it: it has not waited. The waits
    # stay in ms until the one division into seconds, so the median of two is exactly
    # their mean in ms over 1,000 (no rounding of each wait first).
    waits = [max(0.0, now_ms - ms) for ms in since.values()]
    return FairShare(
        keys_waiting=keys_waiting,
        oldest_wait_seconds=max(waits) / 1000 if waits else None,
        median_wait_seconds=statistics.median(waits) / 1000 if waits else None,
        sampled=sampled,
        top_backlogs=_top(backlogs or {}, top),
    )


def _top(backlogs: Mapping[str, int], top: int) -> tuple[tuple[str, int], ...]:
    """The `top` largest backlogs, ties by key (a stable set of series between scrapes)."""
    ranked = sorted(backlogs.items(), key=lambda pair: (-pair[1], pair[0]))[:top]
    return tuple((capped_label_value(name), backlog) for name, backlog in ranked)


def _text(raw: object) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
