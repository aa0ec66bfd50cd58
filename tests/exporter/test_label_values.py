"""The length cap on label values taken from Redis (worker ids, error classes)."""

from __future__ import annotations

from platform_common.jobs_exporter.label_values import MAX_LABEL_VALUE_BYTES, capped_label_value


def test_a_value_that_fits_is_kept_as_it_is() -> None:
    value = "é" * (MAX_LABEL_VALUE_BYTES // 2)  # exactly the cap, in bytes
    assert capped_label_value(value) == value
    assert capped_label_value("host:12:ab12cd") == "host:12:ab12cd"


def test_a_longer_value_keeps_its_head_and_a_digest_of_the_whole() -> None:
    one, two = "a" + "é" * MAX_LABEL_VALUE_BYTES, "a" + "é" * MAX_LABEL_VALUE_BYTES + "x"
    capped = [capped_label_value(one), capped_label_value(two)]
    assert capped[0] != capped[1]  # same head, still two series
    assert capped[0] == capped_label_value(one)  # the same worker keeps its series
    for value in capped:
        assert len(value.encode()) <= MAX_LABEL_VALUE_BYTES
        head, mark, digest = value.rpartition("~")
        assert mark and len(digest) == 12 and int(digest, 16) >= 0
        assert one.startswith(head) and len(head.encode()) >= MAX_LABEL_VALUE_BYTES - 14
