"""The agent-type registry, `<queue prefix>:types` (keys.py): a SET every producer and
worker adds its agent type to, once per process (QueueConnection.register_type). Read
here for the exporter and the operator tools alike (imports flow exporter -> core):
configured types plus bounded discovery, capped.

Discovery reads the set with one SSCAN page (COUNT sized from the cap), so a polluted
set can never make a read unbounded; the result (Selection) is deterministic for a given
set: configured types first, in their order, then discovered ones sorted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from .errors import ValidationError
from .keys import QUEUE_PREFIX, QueueKeys
from .validation import validate_name

__all__ = [
    "MAX_AGENT_TYPES",
    "Selection",
    "registry_reads",
    "scan_count",
    "select_from_replies",
    "select_types",
]

MAX_AGENT_TYPES = 200
"""The most agent types one read returns (the exporter's default cap, and the operator
tools'): configured ones first, then discovered ones."""


@dataclass(frozen=True, slots=True)
class Selection:
    types: tuple[str, ...]
    """Agent types selected, at most max_agent_types: configured first, then discovered."""
    dropped: int
    """Existing types left out because of the cap (including any the scan did not reach)."""
    invalid: int
    """Discovered names that are not valid agent types (not selected)."""


def scan_count(max_agent_types: int) -> int:
    """SSCAN COUNT for one page that, for a set no larger than twice the cap, walks the
    whole hash table (Redis sizes it to the next power of two of its cardinality)."""
    return max(64, 2 * max_agent_types)


def registry_reads(
    prefix: str = QUEUE_PREFIX, max_agent_types: int = MAX_AGENT_TYPES
) -> list[tuple[str | int, ...]]:
    """The two read commands of one discovery, SCARD then one SSCAN page, to send in a
    pipeline (with others); select_from_replies reads their replies."""
    key = QueueKeys.types_key(prefix)
    return [("SCARD", key), ("SSCAN", key, 0, "COUNT", scan_count(max_agent_types))]


def select_from_replies(
    configured: Sequence[str],
    scard: object,
    sscan: object,
    *,
    max_agent_types: int = MAX_AGENT_TYPES,
) -> Selection:
    """select_types from the replies of registry_reads (SCARD, then SSCAN's cursor and
    members)."""
    cursor, members = cast(tuple[Any, list[Any]], sscan)
    return select_types(
        configured,
        (m.decode() if isinstance(m, bytes) else str(m) for m in members),
        set_size=int(cast(Any, scard)),
        scan_complete=int(cursor) == 0,
        max_agent_types=max_agent_types,
    )


def select_types(
    configured: Sequence[str],
    discovered: Iterable[str],
    *,
    set_size: int,
    scan_complete: bool,
    max_agent_types: int,
) -> Selection:
    """Combine configured and discovered names under the cap.

    `set_size` is SCARD of the types set; with `scan_complete` False the members the scan
    did not return are counted as dropped, since they exist but are not selected.
    """
    seen: list[str] = []
    invalid = 0
    scanned = 0
    for raw in discovered:
        scanned += 1
        try:
            name = validate_name(raw, "agent_type")
        except ValidationError:
            invalid += 1
            continue
        if name not in configured:
            seen.append(name)
    candidates = [*configured, *sorted(set(seen))]
    selected = tuple(candidates[:max_agent_types])
    unscanned = 0 if scan_complete else max(0, set_size - scanned)
    dropped = len(candidates) - len(selected) + unscanned
    return Selection(selected, dropped, invalid)
