"""One name per concept: no two modules of the installed packages share a file name."""

from __future__ import annotations

import importlib.util
import re
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


def test_every_module_pyproject_names_exists() -> None:
    # Its comments say which module each extra serves: each name must be importable.
    text = (REPO_ROOT / "pyproject.toml").read_text()
    named = set(re.findall(r"`(platform_common\.[a-z_.]+)`", text))
    assert len(named) >= 4
    assert sorted(n for n in named if not _importable(n)) == []


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent that is a module, not a package
        return False
