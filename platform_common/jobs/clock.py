"""The one place the package reads the wall clock, so tests can control time here."""

from __future__ import annotations

import time

__all__ = ["now"]


def now() -> float:
    """Seconds since the epoch. Redis-side code uses Redis TIME instead."""
    return time.time()
