"""What can be checked of the Dockerfile without a Docker daemon: every file it copies
exists, it installs the package with the extras its commands need, the commands it names
exist, and the final stage runs as a non-root user without build tools."""

from __future__ import annotations

import importlib
import re
import tomllib

from tests.support.paths import REPO_ROOT

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()


def _stages() -> list[str]:
    return re.split(r"^FROM ", DOCKERFILE, flags=re.M)[1:]


def test_every_copied_path_exists_and_passes_dockerignore() -> None:
    ignored = (REPO_ROOT / ".dockerignore").read_text()
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, flags=re.M):
        for path in source.split():
            assert (REPO_ROOT / path).exists(), path
            assert f"!{path.rstrip('/')}" in ignored, f"{path} is excluded from the context"


def test_the_image_installs_the_extras_its_commands_need() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    build, final = _stages()
    # Stage one builds the wheels of exactly the extras stage two installs, by name.
    [built] = re.findall(r'"\.\[([a-z,]+)\]"', build)
    [installed] = re.findall(rf'"{project["name"]}\[([a-z,]+)\]"', final)
    extras = set(installed.split(","))
    assert set(built.split(",")) == extras
    assert extras == {"exporter", "cli", "console"}
    assert extras <= set(project["optional-dependencies"])
    assert {"queue-exporter", "agentjobs"} <= set(project["scripts"])
    for command in ("queue-exporter", "agentjobs"):
        assert command in DOCKERFILE
    # Every console script the image gets resolves to a callable in the package.
    for target in project["scripts"].values():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), target
    for module in ("platform_common.jobs.worker", "platform_common.jobs.heartbeat_probe"):
        assert module in DOCKERFILE
        path = REPO_ROOT / module.replace(".", "/")
        # A module, or a package that `python -m` runs by its __main__.py.
        assert path.with_suffix(".py").exists() or (path / "__main__.py").exists()


def test_multi_stage_slim_non_root_and_no_build_tools_at_the_end() -> None:
    stages = _stages()
    assert len(stages) == 2 and all(s.startswith("python:3.11-slim") for s in stages)
    final = stages[-1]
    assert re.search(r"^USER 10001$", final, flags=re.M)
    assert "--no-index" in final  # installs only the wheels built in stage one
    assert not re.search(r"apt-get|gcc|build-essential|setuptools", final)


def test_the_install_line_is_the_readme_s() -> None:
    # The image installs the package as the README tells a user to: `pip install
    # platform-common-jobs` with named extras, each of which the README explains.
    readme = (REPO_ROOT / "README.md").read_text()
    assert "`pip install platform-common-jobs`" in readme
    [installed] = re.findall(r'"platform-common-jobs\[([a-z,]+)\]"', DOCKERFILE)
    paragraph = readme[readme.index("Install what you use") :].split("\n\n")[0]
    install_paragraph = " ".join(paragraph.split())
    for extra in installed.split(","):
        assert f"`{extra}` (" in install_paragraph, extra
    # And the deploy paragraph (docs/monitoring.md, the exporter) builds from this Dockerfile.
    assert "from the repository's `Dockerfile`" in (REPO_ROOT / "docs/monitoring.md").read_text()
