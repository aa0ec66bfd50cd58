"""Every package with an `__all__` keeps it honest (as httpx's test_exported_members):
each listed name is defined and importable, none is listed twice, `import *` gives
exactly the list, and every public name the package's `__init__` imports from its own
modules, or defines as a class or function, is listed."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType

import pytest

ROOTS = ("platform_common.jobs", "platform_common.jobs_exporter", "platform_common.jobs_monitoring")


def packages_under(root: str) -> Iterator[ModuleType]:
    package = importlib.import_module(root)
    yield package
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{root}."):
        if info.ispkg:
            yield importlib.import_module(info.name)


PACKAGES = sorted(
    package.__name__
    for root in ROOTS
    for package in packages_under(root)
    if hasattr(package, "__all__")
)


def exported(package_name: str) -> list[str]:
    names: list[str] = list(importlib.import_module(package_name).__all__)
    return names


def top_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's statements, including those inside top-level if/try blocks."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.Try):
            nested = statement.body + statement.orelse
            if isinstance(statement, ast.Try):
                nested += statement.finalbody + [s for h in statement.handlers for s in h.body]
            yield from top_level_statements(nested)


def names_imported_from_the_package(package: ModuleType) -> set[str]:
    """Public names the `__init__` binds with `from .x import y` (or the absolute form)."""
    tree = ast.parse(inspect.getsource(package))
    names: set[str] = set()
    for statement in top_level_statements(tree.body):
        if not isinstance(statement, ast.ImportFrom):
            continue
        own = statement.level > 0 or (statement.module or "").startswith(package.__name__)
        if own:
            names |= {alias.asname or alias.name for alias in statement.names}
    # A submodule bound by `from . import x` is the package's own structure, not a member.
    return {
        name
        for name in names
        if not name.startswith("_") and not isinstance(getattr(package, name, None), ModuleType)
    }


def test_the_public_packages_are_found() -> None:
    assert {"platform_common.jobs", "platform_common.jobs.queue"} <= set(PACKAGES)


@pytest.mark.parametrize("package_name", PACKAGES)
def test_every_listed_name_is_defined_once(package_name: str) -> None:
    names = exported(package_name)
    assert all(isinstance(name, str) for name in names)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert duplicates == []
    package = importlib.import_module(package_name)
    undefined = [name for name in names if not hasattr(package, name)]
    assert undefined == []


@pytest.mark.parametrize("package_name", PACKAGES)
def test_import_star_gives_exactly_the_list(package_name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package_name} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(exported(package_name))


@pytest.mark.parametrize("package_name", PACKAGES)
def test_every_public_name_imported_from_the_package_is_listed(package_name: str) -> None:
    package = importlib.import_module(package_name)
    unlisted = names_imported_from_the_package(package) - set(exported(package_name))
    assert unlisted == set()


@pytest.mark.parametrize("package_name", PACKAGES)
def test_every_public_class_and_function_defined_in_the_init_is_listed(
    package_name: str,
) -> None:
    package = importlib.import_module(package_name)
    defined = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == package_name
    }
    assert defined - set(exported(package_name)) == set()
