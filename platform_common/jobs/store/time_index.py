"""Pure helpers of the time-ordered per-owner index: flag parsing, buckets, members, cursors.

Two switches, turned on in this order (each after the step before it is done everywhere):

    JOBSTATE_TIME_INDEX_WRITES   creates and deletes maintain the index entries
    (run `agentjobs backfill`, then `agentjobs backfill --verify` until it exits 0)
    JOBSTATE_TIME_INDEX_READS    list_for_owner reads the index (needs writes on)

Reads before the backfill would under-report: the index would miss every job created
before writes were on. JOBSTATE_TIME_INDEX_ENABLED is the former single switch, kept
to mean both (set on a store that was backfilled and verified); it may not be combined
with the two.

An index entry is keyed only on what never changes after create, so it never moves:

    bucket  = owner_oid, or "__shared__" for owner_oid == ""
    member  = "<created_at in microseconds, 16 digits>:<job_id>"

Members of one bucket all have score 0 in a Redis ZSET, so lexical order is time
order (ties broken by job id) and ZREVRANGEBYLEX reads newest first. The memory
backend keeps the same strings in sorted lists.

A cursor is the last member a page returned, bound to (agent, owner) by a checksum:
`base64url(version byte + member + blake2b(agent, owner, member)[:10])`. It is not a
secret (it names a job the caller has already seen); the checksum makes a malformed,
truncated or foreign (other owner, other agent) cursor an InvalidCursor, never a
wrong page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from typing import NamedTuple

from ..env import parse_bool, parse_int, read_variable
from ..errors import ConfigurationError, InvalidCursor
from ..keys import SHARED_OWNER_BUCKET

__all__ = [
    "DEFAULT_LIST_SCAN_CAP",
    "FLAG_ENV",
    "MAX_CURSOR_LENGTH",
    "READS_ENV",
    "SCAN_CAP_ENV",
    "WRITES_ENV",
    "IndexSwitches",
    "buckets_for",
    "created_us",
    "decode_cursor",
    "encode_cursor",
    "index_switches",
    "job_id_of",
    "list_scan_cap",
    "member",
    "owner_bucket",
]

FLAG_ENV = "JOBSTATE_TIME_INDEX_ENABLED"
WRITES_ENV = "JOBSTATE_TIME_INDEX_WRITES"
READS_ENV = "JOBSTATE_TIME_INDEX_READS"
SCAN_CAP_ENV = "JOBSTATE_LIST_SCAN_CAP"
DEFAULT_LIST_SCAN_CAP = 5000
MAX_CURSOR_LENGTH = 400

_CURSOR_VERSION = 1
_DIGEST_SIZE = 10
_MEMBER = re.compile(r"\d{16}:[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}")


class IndexSwitches(NamedTuple):
    writes: bool
    """Creates and deletes maintain the index entries."""
    reads: bool
    """list_for_owner reads the index (only ever with writes)."""


def index_switches(environ: Mapping[str, str]) -> IndexSwitches:
    """The two switches; unset or blank means off. Anything unrecognised, reads without
    writes, or the former single switch combined with the two is a ConfigurationError."""
    values = {name: read_variable(environ, name) for name in (FLAG_ENV, WRITES_ENV, READS_ENV)}
    parsed = {name: raw is not None and parse_bool(raw, name) for name, raw in values.items()}
    if values[FLAG_ENV] is not None:
        split = [name for name in (WRITES_ENV, READS_ENV) if values[name] is not None]
        if split:
            raise ConfigurationError(
                FLAG_ENV,
                f"means both {WRITES_ENV} and {READS_ENV}; set it or those two, not both "
                f"(also set: {', '.join(split)})",
            )
        return IndexSwitches(parsed[FLAG_ENV], parsed[FLAG_ENV])
    if parsed[READS_ENV] and not parsed[WRITES_ENV]:
        raise ConfigurationError(
            READS_ENV,
            f"needs {WRITES_ENV}=true (an index nobody writes misses every new job); turn "
            f"writes on, run `agentjobs backfill`, check it with `--verify`, then reads",
        )
    return IndexSwitches(parsed[WRITES_ENV], parsed[READS_ENV])


def list_scan_cap(environ: Mapping[str, str]) -> int:
    raw = read_variable(environ, SCAN_CAP_ENV)
    return DEFAULT_LIST_SCAN_CAP if raw is None else parse_int(raw, SCAN_CAP_ENV, minimum=1)


def owner_bucket(owner_oid: str) -> str:
    return owner_oid or SHARED_OWNER_BUCKET


def buckets_for(owner_oid: str) -> tuple[str, ...]:
    """The buckets a caller sees: their own and the shared one (just shared for "")."""
    if owner_oid:
        return (owner_oid, SHARED_OWNER_BUCKET)
    return (SHARED_OWNER_BUCKET,)


def created_us(created_at: float) -> int:
    """created_at (float seconds) as integer microseconds, the index's time unit."""
    return round(created_at * 1_000_000)


def member(created_at_us: int, job_id: str) -> str:
    return f"{created_at_us:016d}:{job_id}"


def job_id_of(index_member: str) -> str:
    return index_member[17:]


def _digest(agent: str, owner_oid: str, index_member: str) -> bytes:
    text = f"{agent}\0{owner_oid}\0{index_member}".encode()
    return hashlib.blake2b(text, digest_size=_DIGEST_SIZE, person=b"pcj-cursor").digest()


def encode_cursor(agent: str, owner_oid: str, index_member: str) -> str:
    raw = bytes([_CURSOR_VERSION]) + index_member.encode() + _digest(agent, owner_oid, index_member)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(agent: str, owner_oid: str, cursor: str) -> str:
    """The member a cursor points after; InvalidCursor when it is malformed or foreign."""
    if not isinstance(cursor, str) or not cursor:
        raise InvalidCursor("must be a non-empty string")
    if len(cursor) > MAX_CURSOR_LENGTH:
        raise InvalidCursor(f"longer than {MAX_CURSOR_LENGTH} characters")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise InvalidCursor("not a cursor returned by this API (bad encoding)") from None
    if len(raw) < 1 + _DIGEST_SIZE or raw[0] != _CURSOR_VERSION:
        raise InvalidCursor("not a cursor returned by this API (unknown version)")
    body, digest = raw[1:-_DIGEST_SIZE], raw[-_DIGEST_SIZE:]
    try:
        index_member = body.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidCursor("not a cursor returned by this API") from None
    if not _MEMBER.fullmatch(index_member):
        raise InvalidCursor("not a cursor returned by this API")
    if digest != _digest(agent, owner_oid, index_member):
        raise InvalidCursor("cursor belongs to another listing (owner or agent) or was altered")
    return index_member
