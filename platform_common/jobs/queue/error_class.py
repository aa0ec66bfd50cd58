"""The exception class a failed attempt is counted under (a bounded metrics label)."""

from __future__ import annotations

import re

from ..keys import OTHER_ERROR_CLASS

__all__ = ["CORRUPT_CLASS", "LOST_CLASS", "error_class_of"]

LOST_CLASS = "LeaseExpired"
"""The reaper's attempts: the worker stopped renewing its lease (crashed or was killed)."""
CORRUPT_CLASS = "CorruptJob"
"""Attempts ended because the stored job does not parse (mode "corrupt")."""

# What queue_fail.lua accepts as a class field; anything else counts as "other".
_CLASS = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,99}")


def error_class_of(error: str, mode: str) -> str:
    """The class of a failed attempt from what the worker records: its error text is
    `ClassName: message` (log_text.describe), so the class is the text's head when
    that is a name; the reaper's and the corrupt-job modes have classes of their own."""
    if mode == "lost":
        return LOST_CLASS
    head = error.split(":", 1)[0]
    if _CLASS.fullmatch(head):
        return head
    return CORRUPT_CLASS if mode == "corrupt" else OTHER_ERROR_CLASS
