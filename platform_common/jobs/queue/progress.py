"""Progress reports of running jobs: what one is, how a report is checked and encoded
before it is sent, and how the last one stored is read back.

A handler reports with `await current_job().report_progress({...})` (queue.context);
the worker stores the last report on the job hash (fields `progress`, `progress_at`,
lua/queue_progress.lua), where it lasts as the record does, and publishes it on
`agent:<type>:progress`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import CorruptQueueState, InvalidProgress
from ..keys import QueueKeys
from ..validation import json_bounds_problem

__all__ = [
    "Progress",
    "encode_progress",
    "parse_event",
    "parse_stored",
]

_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""Compact, ASCII (its length is its size in bytes), no NaN or Infinity (not JSON)."""


@dataclass(frozen=True, slots=True)
class Progress:
    """The last progress report of a job, as stored (or as its event carried it)."""

    agent_type: str
    job_id: str
    data: dict[str, Any]
    """The report: the JSON object the handler passed to report_progress."""
    at: float
    """When it was stored, seconds since the epoch by Redis' clock."""


def encode_progress(data: object, max_bytes: int) -> str:
    """`data` as the compact JSON the worker stores; InvalidProgress naming the problem
    when it is not a JSON object (a Mapping), breaks the bounds every stored document
    keeps (validation.json_bounds_problem: at most MAX_JSON_DEPTH deep, string keys, no
    lone surrogate), has a value JSON has no form for (NaN, Infinity, an object) or
    encodes to more than `max_bytes`."""
    if not isinstance(data, Mapping):
        raise InvalidProgress(f"must be a JSON object (a dict), got {type(data).__name__}")
    report = dict(data)
    problem = json_bounds_problem(report, max_bytes=max_bytes)
    if problem is not None:
        raise InvalidProgress(problem)
    try:
        text = _ENCODER.encode(report)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidProgress(f"is not JSON-serialisable: {exc}") from None
    if len(text) > max_bytes:
        raise InvalidProgress(
            f"is {len(text)} bytes encoded, over the limit of {max_bytes} "
            "(QUEUE_MAX_PROGRESS_BYTES)"
        )
    return text


def parse_stored(
    keys: QueueKeys, job_id: str, report: str | None, at: str | None
) -> Progress | None:
    """The job's stored fields `progress` and `progress_at` as a Progress; None when it
    never reported. CorruptQueueState naming the job key when they do not parse (only
    the progress script writes them)."""
    if report is None:
        return None
    data = _object(report)
    if data is None or at is None or not at.isdigit() or len(at) > 15:
        raise CorruptQueueState(
            keys.job(job_id), f"its progress fields do not parse: {report!r:.60}, {at!r:.20}"
        )
    return Progress(keys.agent_type, job_id, data, int(at) / 1000)


def parse_event(agent_type: str, message: str) -> Progress | None:
    """A message of `agent:<type>:progress` as a Progress; None for one the progress
    script did not publish (a client that may PUBLISH there sent something else)."""
    event = _object(message)
    if event is None:
        return None
    job_id, at, data = event.get("job_id"), event.get("at"), event.get("progress")
    if not isinstance(job_id, str) or not isinstance(at, int) or not isinstance(data, dict):
        return None
    return Progress(agent_type, job_id, data, at / 1000)


def _object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
