"""Which agent types a scrape exports: configured ones plus bounded discovery, capped.

Discovery reads the `jobs:types` set with one SSCAN page (COUNT sized from the cap), so
a polluted set can never make a scrape unbounded. Names that are not valid label values
are skipped (and counted as malformed); types beyond `max_agent_types` are counted as
dropped. The result is deterministic for a given set: configured types first, in their
configured order, then discovered ones sorted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from platform_common.jobs.errors import ValidationError
from platform_common.jobs.validation import validate_name

__all__ = ["Selection", "scan_count", "select_types"]


@dataclass(frozen=True, slots=True)
class Selection:
    types: tuple[str, ...]
    """Agent types to export, at most max_agent_types."""
    dropped: int
    """Existing types left out because of the cap (including any the scan did not reach)."""
    invalid: int
    """Discovered names that are not valid agent types (not exported)."""


def scan_count(max_agent_types: int) -> int:
    """SSCAN COUNT for one page that, for a set no larger than twice the cap, walks the
    whole hash table (Redis sizes it to the next power of two of its cardinality)."""
    return max(64, 2 * max_agent_types)


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
    did not return are counted as dropped, since they exist but are not exported.
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
    exported = tuple(candidates[:max_agent_types])
    unscanned = 0 if scan_complete else max(0, set_size - scanned)
    dropped = len(candidates) - len(exported) + unscanned
    return Selection(exported, dropped, invalid)
