"""How ages and instants read to people: one format for the CLI and the console."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Literal

__all__ = ["NONE", "age", "timestamp"]

NONE = "—"
"""What an unknown age or an absent instant shows."""


def age(seconds: float | None) -> str:
    """3.2s, 4m05s, 2h03m, 3d04h; NONE when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return NONE
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def timestamp(
    seconds: float | None, timespec: Literal["seconds", "milliseconds"] = "milliseconds"
) -> str:
    """Seconds since the epoch as UTC ISO 8601; NONE when absent."""
    if seconds is None:
        return NONE
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec=timespec)
