"""The wheel ships what users run: everything under the platform_common namespace, no
generic top-level names, no test process control, every module of the tree; and the
core needs only redis, orjson and opentelemetry-api."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator

import pytest

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
# Folder in the repository -> the import path it installs under.
INSTALLED_AS = {
    "platform_common/jobs": "platform_common/jobs",
    "exporter": "platform_common/jobs_exporter",
    "monitoring": "platform_common/jobs_monitoring",
    "dashboards": "platform_common/jobs_monitoring/dashboards",
    "alerts": "platform_common/jobs_monitoring/alerts",
    "runbooks": "platform_common/jobs_monitoring/runbooks",
}
CORE_DEPENDENCIES = {"redis", "orjson", "opentelemetry-api"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    """The wheel built from a copy of the tracked tree (the checkout stays untouched)."""
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-q", "-w", str(out), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    (built,) = out.glob("*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def _code_files(names: list[str]) -> set[str]:
    return {n for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}


def test_only_the_platform_common_namespace_is_installed(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in _code_files(wheel.namelist())}
    assert tops == {"platform_common"}
    assert not any(n.startswith("platform_common/__init__") for n in wheel.namelist())


def test_every_module_of_the_tree_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    shipped = set(wheel.namelist())
    expected = set()
    for folder, installed in INSTALLED_AS.items():
        for path in (ROOT / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                relative = path.relative_to(ROOT / folder).as_posix()
                expected.add(f"{installed}/{relative}")
    assert expected - shipped == set()


def test_data_files_ship_and_test_helpers_do_not(wheel: zipfile.ZipFile) -> None:
    shipped = set(wheel.namelist())
    lua_dir = ROOT / "platform_common/jobs/lua"
    lua = {p.relative_to(lua_dir).as_posix() for p in lua_dir.rglob("*.lua")}
    assert any(name.startswith("include/") for name in lua)  # the scripts' shared helpers
    assert {f"platform_common/jobs/lua/{name}" for name in lua} <= shipped
    for marker in ("jobs", "jobs_exporter", "jobs_monitoring"):
        assert f"platform_common/{marker}/py.typed" in shipped
    assert "platform_common/jobs_monitoring/site.defaults.yaml" in shipped
    assert "platform_common/jobs/queue/job_payload.schema.json" in shipped
    pages = {p.name for p in (ROOT / "runbooks").glob("*.md")}
    assert {f"platform_common/jobs_monitoring/runbooks/{page}" for page in pages} <= shipped
    for name in shipped:
        assert "testing" not in name.split("/") and not name.startswith("tests/")
        assert "redis_server" not in name and "redis_cluster" not in name


def test_the_core_needs_only_redis_orjson_and_opentelemetry(wheel: zipfile.ZipFile) -> None:
    (metadata_name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    metadata = email.message_from_bytes(wheel.read(metadata_name))
    requirements = metadata.get_all("Requires-Dist") or []
    core = {_project(requirement) for requirement in requirements if "extra ==" not in requirement}
    assert core == CORE_DEPENDENCIES
    extras = set(metadata.get_all("Provides-Extra") or [])
    assert {"http", "exporter", "monitoring"} <= extras


def _project(requirement: str) -> str:
    name = requirement.split(";")[0].strip()
    for separator in ("[", "<", ">", "=", "!", "~", " "):
        name = name.split(separator)[0]
    return name.lower()
