"""README's "Install what you use" names every extra pyproject.toml declares."""

from __future__ import annotations

import re
import tomllib

from tests.support.paths import REPO_ROOT


def test_install_what_you_use_names_every_extra() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"]) - {"dev"}  # the project's own tools
    readme = (REPO_ROOT / "README.md").read_text()
    match = re.search(r"^Install what you use:(.+?)\n\n", readme, re.S | re.M)
    assert match, "README lost its 'Install what you use' paragraph"
    named = set(re.findall(r"`(\w+)`\s\(", match[1]))
    assert sorted(extras - named) == []
