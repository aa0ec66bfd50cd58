"""Values as a job record stores them, read for a listing without trusting them: a number
or a time that does not parse is None (and its stored text is kept to be shown), an id
that is not UTF-8 is kept byte for byte, never an error that would hide the other rows."""

from __future__ import annotations

import math

__all__ = [
    "MAX_SHOWN_STORED",
    "ms_seconds",
    "readable",
    "shown_stored",
    "stored_count",
    "stored_id",
    "stored_ms",
    "stored_text",
]

MAX_SHOWN_STORED = 40
"""Most characters of a stored value that does not parse a listing row shows."""

_LAST_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: the last instant a listing can show as a date."""


def stored_id(raw: bytes | str) -> str:
    """A job id as Redis holds it: bytes that are not UTF-8 as surrogate escapes, which
    queue.dead_letters.wire() turns back into the same bytes (and `readable` shows)."""
    return raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")


def stored_text(raw: bytes | str | None) -> str:
    """Stored text to show or search: bytes that are not UTF-8 as backslash escapes."""
    if raw is None or isinstance(raw, str):
        return raw or ""
    return raw.decode("utf-8", "backslashreplace")


def readable(text: str) -> str:
    """`text` with the surrogate escapes of bytes that are not UTF-8 (see stored_id) as
    \\xNN: what a page or a terminal can print."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def stored_count(raw: bytes | str | None) -> int | None:
    """A whole number as the scripts write it; None when absent or when it does not parse."""
    text = stored_text(raw).strip()
    return int(text) if text.isascii() and text.isdigit() else None


def stored_ms(raw: bytes | str | None) -> int | None:
    """A time in Redis ms; None when absent, not a finite number, or outside the dates
    a page can show (year 1970 to 9999)."""
    try:
        value = float(stored_text(raw))
    except ValueError:
        return None
    if not math.isfinite(value) or not 0 <= value <= _LAST_MS:
        return None
    return int(value)


def ms_seconds(raw_ms: float | str | bytes | None) -> float | None:
    """Milliseconds (as the scripts write them) -> seconds; None when absent. Trusted: a
    value that is not a number raises ValueError."""
    return None if raw_ms in (None, "") else int(float(raw_ms)) / 1000


def shown_stored(raw: bytes | str | None) -> str:
    """A stored value that does not parse, as a listing row shows it: its text, cut."""
    text = stored_text(raw)
    return text if len(text) <= MAX_SHOWN_STORED else text[: MAX_SHOWN_STORED - 1] + "…"
