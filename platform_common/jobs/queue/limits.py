"""An agent type's limits: a rate of job starts, a burst, caps on jobs running at once,
and the key fair share goes by. Live settings: they are kept in Redis (keys.py, `limits`,
one hash per type, written by lua/queue_limits.lua) and the claim script reads them on
every call that starts jobs (lua/include/limits.lua), so a change holds from the next
claim on, in every worker, without a restart. A type without limits is plain FIFO at
today's cost (the claim reads one absent key).

The fields, declared once here (LIMIT_FIELDS): the CLI (`agentjobs limits`), the console
and the docs name them so."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from redis.exceptions import ResponseError

from ..errors import CorruptQueueState, ValidationError
from ..keys import FAIR_BY_KEYS
from .connection import QueueConnection

__all__ = [
    "FAIR_BY_KEYS",
    "FAIR_WAITS_READ",
    "KEEP",
    "LIMIT_FIELDS",
    "MAX_KEY_WEIGHT",
    "MAX_LIMIT",
    "FairWaits",
    "Keep",
    "Limits",
    "Rate",
    "key_weights_of",
    "limit_changes",
    "parse_rate",
    "read_fair_waits",
    "read_key_weights",
    "read_limits",
    "weight_changes",
    "write_key_weights",
    "write_limits",
]

MAX_LIMIT: Final = 1_000_000_000
"""Largest rate count, burst and cap (the claim script refuses a stored value above it)."""

MAX_INTERVAL_SECONDS: Final = 86_400
"""Longest rate interval: a day."""

MAX_KEY_WEIGHT: Final = 1000
"""Largest weight of a fairness key: that many of its jobs in a row on its turn."""

WEIGHT_PREFIX: Final = "weight:"
"""A key's weight is the limits hash's field `weight:<key>` (lua/include/fair_turns.lua)."""

MAX_FAIR_KEY_LENGTH: Final = 200
"""Longest fairness key (the payload's tenant, orchestrator_id and session_id)."""

LIMIT_FIELDS: Final = ("fair_by", "rate", "burst", "max_running", "max_running_per_key")
"""The limits a type can have, as set_limits, `agentjobs limits set` (--fair-by, --rate,
--burst, --max-running, --max-running-per-key) and the console name them."""

_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_RATE = re.compile(r"([0-9]{1,10}) ?/ ?([0-9]{0,6}) ?(ms|s|min|m|h)")


class Keep:
    """The type of KEEP."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Final = Keep()
"""set_limits' default for a limit it leaves as it is (None lifts one)."""


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` job starts per `interval_ms`, across every worker."""

    count: int
    interval_ms: int

    def __str__(self) -> str:
        for unit in ("h", "m", "s"):
            per = int(_UNITS[unit] * 1000)
            if self.interval_ms % per == 0:
                times = self.interval_ms // per
                return f"{self.count}/{'' if times == 1 else times}{unit}"
        return f"{self.count}/{self.interval_ms}ms"

    @property
    def per_second(self) -> float:
        return self.count * 1000 / self.interval_ms


@dataclass(frozen=True, slots=True)
class Limits:
    """An agent type's limits; None where there is none."""

    agent_type: str
    fair_by: str | None = None
    """The payload field fair share goes by (FAIR_BY_KEYS), or None: plain FIFO."""
    rate: Rate | None = None
    """At most rate.count job starts per rate.interval_ms, across every worker."""
    burst: int | None = None
    """How many starts may come at once after a quiet spell (None: rate.count)."""
    max_running: int | None = None
    """At most this many jobs of the type running at once, across every worker."""
    max_running_per_key: int | None = None
    """At most this many running at once per fair-share key."""

    @property
    def any(self) -> bool:
        """Whether any limit is set (else the type is plain FIFO)."""
        return any(self.as_dict()[name] is not None for name in LIMIT_FIELDS)

    def as_dict(self) -> dict[str, Any]:
        """The limits as JSON holds them (`agentjobs limits show --output json`): the
        rate as text ("100/s"), None where there is none."""
        return {
            "agent_type": self.agent_type,
            "fair_by": self.fair_by,
            "rate": None if self.rate is None else str(self.rate),
            "burst": self.burst,
            "max_running": self.max_running,
            "max_running_per_key": self.max_running_per_key,
        }


FAIR_WAITS_READ: Final = 10_000
"""Most fairness keys read_fair_waits reads whole; past it, a random sample of this many."""


@dataclass(frozen=True, slots=True)
class FairWaits:
    """Fair share now: how many keys have jobs waiting, and the ones waiting longest
    without a start (key, seconds), longest first."""

    keys_waiting: int
    longest: list[tuple[str, float]]
    sampled: bool = False
    """Whether `longest` comes from a random sample of FAIR_WAITS_READ keys (more wait)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "keys_waiting": self.keys_waiting,
            "longest": [{"key": key, "waited_seconds": round(age, 3)} for key, age in self.longest],
            "sampled": self.sampled,
        }


async def read_fair_waits(connection: QueueConnection, agent_type: str, top: int) -> FairWaits:
    """The fairness keys of `agent_type` with jobs waiting and the `top` that have waited
    longest without a start (the ring's since hash, keys.py; Redis' clock), plain reads.
    CorruptQueueState if the hash holds another type."""
    keys = await connection.seen_keys(agent_type)
    count, now = await connection.execute_many([("HLEN", keys.fair_since), ("TIME",)])
    if isinstance(count, ResponseError):
        raise await connection.refusal(count, [keys.fair_since]) from count
    for reply in (count, now):
        if isinstance(reply, Exception):
            raise reply
    if not count:
        return FairWaits(0, [])
    sampled = count > FAIR_WAITS_READ
    command = (
        ("HRANDFIELD", keys.fair_since, FAIR_WAITS_READ, "WITHVALUES")
        if sampled
        else ("HGETALL", keys.fair_since)
    )
    [stored] = await connection.execute_many([command])
    if isinstance(stored, Exception):
        raise stored
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    ages = []
    for key, since in _pairs(stored).items():
        if since.isascii() and since.isdigit():
            ages.append((key, max(0.0, (now_ms - int(since)) / 1000)))
    ages.sort(key=lambda item: (-item[1], item[0]))
    return FairWaits(int(count), ages[:top], sampled)


def parse_rate(text: object) -> Rate:
    """A rate as `--rate` takes it: "N/s", "N/m" (or "N/min"), "N/h", "N/ms", with an
    optional number of units ("5/10s"); ValidationError naming `rate` otherwise."""
    if isinstance(text, Rate):
        return _checked_rate(text)
    if not isinstance(text, str):
        raise ValidationError("rate", f"must be text such as '100/s', got {type(text).__name__}")
    found = _RATE.fullmatch(text)
    if found is None:
        raise ValidationError(
            "rate", f"{text[:40]!r} is not a rate such as '100/s', '5/m', '1000/h' or '3/10s'"
        )
    count, times, unit = int(found[1]), int(found[2] or 1), found[3]
    return _checked_rate(Rate(count, round(times * _UNITS[unit] * 1000)))


def _checked_rate(rate: Rate) -> Rate:
    if not (_whole(rate.count) and 1 <= rate.count <= MAX_LIMIT):
        raise ValidationError("rate", f"the count must be a whole number from 1 to {MAX_LIMIT}")
    if not (_whole(rate.interval_ms) and 1 <= rate.interval_ms <= MAX_INTERVAL_SECONDS * 1000):
        raise ValidationError(
            "rate", f"the interval must be from 1 ms to {MAX_INTERVAL_SECONDS} s (a day)"
        )
    return rate


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def limit_changes(
    *,
    fair_by: str | Keep | None = KEEP,
    rate: str | Rate | Keep | None = KEEP,
    burst: int | Keep | None = KEEP,
    max_running: int | Keep | None = KEEP,
    max_running_per_key: int | Keep | None = KEEP,
) -> list[str]:
    """The limits hash's field, value pairs of a change ("" lifts a limit), every value
    checked first: ValidationError naming the first bad one, nothing to write."""
    pairs: list[str] = []
    if not isinstance(fair_by, Keep):
        if fair_by is None or fair_by == "none":
            pairs += ["fair_by", ""]
        elif fair_by in FAIR_BY_KEYS:
            pairs += ["fair_by", str(fair_by)]
        else:
            shown = repr(fair_by)[:60]
            raise ValidationError(
                "fair_by", f"{shown} is none of {', '.join(FAIR_BY_KEYS)} or none"
            )
    if not isinstance(rate, Keep):
        if rate is None:
            pairs += ["rate", "", "interval_ms", ""]
        else:
            parsed = parse_rate(rate)
            pairs += ["rate", str(parsed.count), "interval_ms", str(parsed.interval_ms)]
    for name, value in (
        ("burst", burst),
        ("max_running", max_running),
        ("max_running_per_key", max_running_per_key),
    ):
        if isinstance(value, Keep):
            continue
        if value is None:
            pairs += [name, ""]
        elif _whole(value) and 1 <= value <= MAX_LIMIT:
            pairs += [name, str(value)]
        else:
            raise ValidationError(
                name, f"must be a whole number from 1 to {MAX_LIMIT} (or none), got {value!r:.60}"
            )
    if not pairs:
        raise ValidationError("limits", "nothing to change: name at least one limit")
    return pairs


def weight_changes(weights: object) -> list[str]:
    """The limits hash's field, value pairs that give each fairness key of `weights` (a
    mapping key -> whole number from 1 to MAX_KEY_WEIGHT, or None to lift it) its
    weight, every one checked first: ValidationError naming `key_weights`, nothing to
    write."""
    if not isinstance(weights, Mapping) or not weights:
        raise ValidationError("key_weights", "give at least one key and its weight")
    pairs: list[str] = []
    for key, weight in weights.items():
        if not (isinstance(key, str) and key.strip() and len(key) <= MAX_FAIR_KEY_LENGTH):
            raise ValidationError(
                "key_weights",
                f"a key must be text of 1 to {MAX_FAIR_KEY_LENGTH} characters, got {key!r:.60}",
            )
        if weight is None:
            pairs += [WEIGHT_PREFIX + key, ""]
        elif _whole(weight) and 1 <= weight <= MAX_KEY_WEIGHT:
            pairs += [WEIGHT_PREFIX + key, str(weight)]
        else:
            raise ValidationError(
                "key_weights",
                f"the weight of {key!r:.60} must be a whole number from 1 to {MAX_KEY_WEIGHT} "
                f"(or None), got {weight!r:.60}",
            )
    return pairs


def key_weights_of(stored: Mapping[str, str]) -> dict[str, int]:
    """The fairness keys' weights a limits hash holds (its `weight:<key>` fields), by key;
    a value that does not parse is left out (the claim refuses it, naming it)."""
    return {
        name[len(WEIGHT_PREFIX) :]: int(value)
        for name, value in stored.items()
        if name.startswith(WEIGHT_PREFIX) and value.isascii() and value.isdigit()
        and 1 <= int(value) <= MAX_KEY_WEIGHT
    }  # fmt: skip


async def write_limits(connection: QueueConnection, agent_type: str, pairs: list[str]) -> Limits:
    """Write checked `pairs` (limit_changes) to the type's limits hash; the limits as they
    are now. CorruptQueueState, nothing written, if the key holds another type."""
    keys = await connection.seen_keys(agent_type)
    stored = await connection.run_script(connection.scripts.limits, [keys.limits], pairs)
    return _limits_of(agent_type, keys.limits, _pairs(stored))


async def write_key_weights(
    connection: QueueConnection, agent_type: str, pairs: list[str]
) -> dict[str, int]:
    """Write checked `pairs` (weight_changes) to the type's limits hash; every key's weight
    as it is now. CorruptQueueState, nothing written, if the key holds another type."""
    keys = await connection.seen_keys(agent_type)
    stored = await connection.run_script(connection.scripts.limits, [keys.limits], pairs)
    return key_weights_of(_pairs(stored))


async def read_limits(connection: QueueConnection, agent_type: str) -> Limits:
    """The limits of `agent_type` (configured, or seen by Redis). CorruptQueueState if the
    key holds another type or a value the claim would refuse."""
    keys = await connection.seen_keys(agent_type)
    return _limits_of(agent_type, keys.limits, await _stored(connection, keys.limits))


async def read_key_weights(connection: QueueConnection, agent_type: str) -> dict[str, int]:
    """The fairness keys of `agent_type` given a weight, and their weights."""
    keys = await connection.seen_keys(agent_type)
    return key_weights_of(await _stored(connection, keys.limits))


async def _stored(connection: QueueConnection, key: str) -> dict[str, str]:
    [stored] = await connection.execute_many([("HGETALL", key)])
    if isinstance(stored, ResponseError):  # WRONGTYPE: named as the claim would name it
        raise await connection.refusal(stored, [key]) from stored
    if isinstance(stored, Exception):
        raise stored
    return _pairs(stored)


def _pairs(stored: Any) -> dict[str, str]:
    """HGETALL's reply (a dict, or a flat list from a script) as text."""
    if isinstance(stored, dict):
        items = list(stored.items())
    else:
        items = list(zip(stored[::2], stored[1::2], strict=True))
    return {_text(name): _text(value) for name, value in items}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _limits_of(agent_type: str, key: str, stored: dict[str, str]) -> Limits:
    """The stored fields as Limits; CorruptQueueState naming the first that does not
    parse (the claim refuses the same ones)."""

    def number(name: str, top: int = MAX_LIMIT) -> int | None:
        raw = stored.get(name)
        if raw is None:
            return None
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 15 and 1 <= int(raw) <= top):
            raise CorruptQueueState(
                key, f"field {name} is not a whole number from 1 to {top}: {raw[:40]!r}"
            )
        return int(raw)

    count, interval = number("rate"), number("interval_ms", MAX_LIMIT)
    if (count is None) != (interval is None):
        raise CorruptQueueState(key, "fields rate and interval_ms are set one without the other")
    fair_by = stored.get("fair_by")
    if fair_by is not None and fair_by not in FAIR_BY_KEYS:
        raise CorruptQueueState(key, f"field fair_by is none of {FAIR_BY_KEYS}: {fair_by[:40]!r}")
    return Limits(
        agent_type,
        fair_by=fair_by,
        rate=None if count is None or interval is None else Rate(count, interval),
        burst=number("burst"),
        max_running=number("max_running"),
        max_running_per_key=number("max_running_per_key"),
    )
