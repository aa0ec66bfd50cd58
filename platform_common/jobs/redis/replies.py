"""Reading reply shapes that differ between RESP2 and RESP3, in one place."""

from __future__ import annotations

from typing import Any

__all__ = ["first_score"]


def first_score(reply: Any) -> Any | None:
    """The score of a ZRANGE ... 0 0 WITHSCORES reply as Redis sent it (RESP2: a flat
    [member, score]; RESP3: [[member, score]]), or None when the set is empty."""
    items = list(reply)
    if not items:
        return None
    head = items[0]
    return head[1] if isinstance(head, list | tuple) else items[1]
