"""Label values the exporter takes from Redis as they are written there (worker ids,
error classes), bounded in length.

A worker names itself (any text) and an error class may be written by hand, while
Prometheus keeps every byte of a label value in every series' index, and a server with
`label_value_length_limit` rejects the whole scrape over one value past it. So a longer
value is cut to at most MAX_LABEL_VALUE_BYTES: its head, `~` and the first 12 hex digits
of the whole value's SHA-256, so two long values that share their head stay two series.
"""

from __future__ import annotations

import hashlib

__all__ = ["MAX_LABEL_VALUE_BYTES", "capped_label_value"]

MAX_LABEL_VALUE_BYTES = 128
"""Longest worker or error_class label value, in bytes of UTF-8 (a host:pid:nonce
worker id, a Kubernetes pod name or a qualified exception name fits)."""

_MARK = "~"
_DIGEST_HEX = 12
_HEAD_BYTES = MAX_LABEL_VALUE_BYTES - len(_MARK) - _DIGEST_HEX


def capped_label_value(value: str) -> str:
    """`value` itself when it fits MAX_LABEL_VALUE_BYTES, else its head, `~` and a
    digest of the whole (see the module's docstring)."""
    # "replace": a lone surrogate (an undecodable byte kept by the client) still counts.
    encoded = value.encode("utf-8", "replace")
    if len(encoded) <= MAX_LABEL_VALUE_BYTES:
        return value
    # Cut on a character boundary: "ignore" drops a multi-byte character cut in two.
    head = encoded[:_HEAD_BYTES].decode("utf-8", "ignore")
    return f"{head}{_MARK}{hashlib.sha256(encoded).hexdigest()[:_DIGEST_HEX]}"
