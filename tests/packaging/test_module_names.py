"""One name per concept: no two modules of the installed packages share a file name."""

from __future__ import annotations

from collections import Counter

from tests.support.paths import REPO_ROOT

PACKAGE_FOLDERS = ("platform_common", "exporter", "monitoring", "dashboards", "alerts", "runbooks")
# Names Python gives a fixed meaning to: one per package by design.
STRUCTURAL = {"__init__.py", "__main__.py"}


def test_no_two_modules_share_a_name() -> None:
    names = Counter(
        path.name
        for folder in PACKAGE_FOLDERS
        for path in (REPO_ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts and path.name not in STRUCTURAL
    )
    assert sum(names.values()) > 50  # the walk found the tree
    assert sorted(name for name, count in names.items() if count > 1) == []
