"""Reading reply shapes that differ between RESP2 and RESP3, in one place."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_number", "first_score", "hash_fields"]


def first_score(reply: Any) -> Any | None:
    """The score of a ZRANGE ... 0 0 WITHSCORES reply as Redis sent it (RESP2: a flat
    [member, score]; RESP3: [[member, score]]), or None when the set is empty."""
    items = list(reply)
    if not items:
        return None
    head = items[0]
    return head[1] if isinstance(head, list | tuple) else items[1]


def hash_fields(reply: object) -> dict[str, str]:
    """HGETALL's reply (RESP2: a flat [field, value, ...]; RESP3: a dict) as a dict of
    text; anything else is empty, a dangling last field dropped."""
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    if not isinstance(reply, list | tuple):
        return {}
    items = iter(reply)  # one shared iterator pairs them
    return dict(zip(map(str, items), map(str, items), strict=False))


def finite_number(raw: object) -> float | None:
    """A stored value as a finite float, or None when it is not one (text, nan, inf)."""
    try:
        value = float(str(raw))
    except ValueError:
        return None
    return value if math.isfinite(value) else None
