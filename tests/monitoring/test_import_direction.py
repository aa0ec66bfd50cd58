"""Imports go one way: core <- exporter <- monitoring base <- renderers <- generate; and
no modules import each other, directly or through others (no import circles). One core
module is a door the other way: the CLI's `deploy render` imports the Kubernetes
renderer (a composition root like generate), only when it runs.

Every module of the repository is parsed with `ast` (nothing is imported), each import
resolved to its full dotted name (relative ones too, and importlib calls with a literal
name), and checked against the layer rules below. A second set of tests feeds the same
checker a forbidden import per rule, so the rules are shown to bite.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CORE = "platform_common.jobs"
EXPORTER = "platform_common.jobs_exporter"
MONITORING = "platform_common.jobs_monitoring"
RENDERERS = tuple(f"{MONITORING}.{name}" for name in ("alerts", "dashboards", "runbooks"))
GENERATE = f"{MONITORING}.generate"
# The composition root: generate, and the command line that runs it.
ENTRY = f"{MONITORING}.__main__"
# A second composition root: the worker manifests with the alert rules as a PrometheusRule,
# which the CLI's deploy command (and only it, of the core) imports.
KUBERNETES = f"{MONITORING}.kubernetes"
DEPLOY_COMMAND = f"{CORE}.cli.deploy_command"
OLD_TOP_LEVEL = ("alerts", "dashboards", "runbooks", "monitoring")

# Source folder -> the package it installs as (pyproject's package-dir).
PACKAGES = {
    "platform_common/jobs": CORE,
    "exporter": EXPORTER,
    "monitoring": MONITORING,
    "alerts": f"{MONITORING}.alerts",
    "dashboards": f"{MONITORING}.dashboards",
    "runbooks": f"{MONITORING}.runbooks",
}
OTHER_FOLDERS = ("scripts", "tests", "bench", "demo", "examples")
# Folders that are packages of their own (imported as `bench.cost`, ...).
IMPORTABLE_FOLDERS = ("tests", "bench", "demo")
DYNAMIC_IMPORTS = {"import_module", "__import__", "find_spec", "files"}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


def modules() -> list[Module]:
    found = []
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join((package, *parts[:-1])) if is_package else ".".join((package, *parts))
            found.append(Module(name, path, is_package))
    for folder in OTHER_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" not in path.parts:
                found.append(Module(f"<{path.relative_to(ROOT)}>", path, False))
    return found


def imported(source: str, module: str, is_package: bool) -> set[str]:
    """Every dotted name `source` imports: `from a import b` yields both a and a.b."""
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names if alias.name != "*"}
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called in DYNAMIC_IMPORTS and isinstance(first, ast.Constant):
                names |= {first.value} if isinstance(first.value, str) else set()
    return names


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(module: str, names: set[str]) -> list[str]:
    """The layer rules: what `module` may not import."""
    forbidden = list(OLD_TOP_LEVEL)  # the generic names are installed nowhere any more
    if module == DEPLOY_COMMAND:
        names = {name for name in names if name not in (MONITORING, KUBERNETES)}
    if within(module, CORE):
        forbidden += [EXPORTER, MONITORING]
    elif within(module, EXPORTER):
        forbidden += [MONITORING]
    elif within(module, MONITORING) and module not in (GENERATE, ENTRY, KUBERNETES):
        # Base modules and renderers: never the composition root.
        forbidden += [GENERATE]
        own = next((r for r in RENDERERS if within(module, r)), None)
        forbidden += [r for r in RENDERERS if r != own]  # base: every renderer
    return sorted(
        f"{module} imports {name}" for name in names for bad in forbidden if within(name, bad)
    )


def all_violations() -> list[str]:
    problems = []
    for module in modules():
        names = imported(module.path.read_text(), module.name, module.is_package)
        problems += violations(module.name, names)
    return problems


# -- the tree -------------------------------------------------------------------------


def test_the_tree_follows_the_import_direction() -> None:
    found = modules()
    names = {m.name for m in found}
    # The inventory is real: every layer and every renderer has modules in it.
    for package in (CORE, EXPORTER, MONITORING, GENERATE, *RENDERERS):
        assert any(within(name, package) for name in names), package
    assert all_violations() == []


def test_renderers_use_the_base() -> None:
    for renderer in RENDERERS:
        used = set()
        for module in modules():
            if within(module.name, renderer):
                used |= imported(module.path.read_text(), module.name, module.is_package)
        assert any(within(name, f"{MONITORING}.spec") for name in used), renderer


def test_generate_is_imported_only_from_outside_the_packages() -> None:
    importers = {
        module.name
        for module in modules()
        if GENERATE in imported(module.path.read_text(), module.name, module.is_package)
    }
    assert importers and all(name.startswith("<") or name == ENTRY for name in importers)


def test_importing_the_exporter_and_the_base_loads_no_further_layer() -> None:
    # The runtime view of the same rules, in a fresh interpreter.
    probe = (
        "import sys\n"
        "import platform_common.jobs.cli.root\n"
        f"assert not [m for m in sys.modules if m.startswith('{MONITORING}')], 'the CLI'\n"
        "import platform_common.jobs_exporter.app\n"
        f"assert not [m for m in sys.modules if m.startswith('{MONITORING}')], 'exporter'\n"
        "import platform_common.jobs_monitoring.spec, platform_common.jobs_monitoring.site\n"
        "loaded = [m for m in sys.modules if m.startswith('platform_common.jobs_monitoring.')]\n"
        f"assert not [m for m in loaded if m.startswith({RENDERERS!r})], loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, cwd="/"
    )
    assert result.returncode == 0, result.stderr


# -- no circles ----------------------------------------------------------------------------


def importable_modules() -> list[Module]:
    """The packages' modules and those of the repository's own packages (bench, ...)."""
    found = [module for module in modules() if not module.name.startswith("<")]
    for folder in IMPORTABLE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            found.append(Module(".".join(parts[:-1] if is_package else parts), path, is_package))
    return found


def outside_main_guard(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under `if __name__ == "__main__":`: that code runs in the
    module run as a script (`__main__`), not in the module others import."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "__name__ == '__main__'",
            '__name__ == "__main__"',
        ):
            continue
        yield node
        yield from outside_main_guard(node)


def dependencies(source: str, module: Module, known: set[str]) -> set[str]:
    """The modules of `known` that `source` imports (a function's lazy import too): for
    `from a import b`, module a.b if there is one, else a."""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    found: set[str] = set()
    for node in outside_main_guard(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return (found & known) - {module.name}


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of `graph` (module -> modules it imports), or []."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        found: list[str] = exc.args[1]
        return found
    return []


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    found = importable_modules()
    known = {module.name for module in found}
    assert {"bench.cost", "platform_common.jobs.acl", "tests.support.ports"} <= known
    graph = {m.name: dependencies(m.path.read_text(), m, known) for m in found}
    assert circle(graph) == []


@pytest.mark.parametrize(
    "graph",
    [
        {"a": {"b"}, "b": {"a"}},
        {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()},
    ],
)
def test_a_circle_is_found(graph: dict[str, set[str]]) -> None:
    assert circle(graph)


def test_a_lazy_import_counts_and_a_main_guarded_one_does_not() -> None:
    known = {"p.cli", "p.acl"}
    acl = Module("p.acl", ROOT, False)
    lazy = "def main():\n    from .cli import main\n"
    guarded = "if __name__ == '__main__':\n    from p.cli import main\n"
    assert dependencies(lazy, acl, known) == {"p.cli"}
    assert dependencies(guarded, acl, known) == set()


# -- the checker bites -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "is_package", "source"),
    [
        (f"{MONITORING}.spec", False, "from .dashboards.queue_overview import queue_overview"),
        (f"{MONITORING}.spec", False, f"import {MONITORING}.runbooks.render"),
        (f"{MONITORING}.site", False, "from . import generate"),
        (f"{MONITORING}.dashboards.queue_overview", False, "from ..alerts import spec"),
        (f"{MONITORING}.runbooks", True, f"from {MONITORING}.dashboards import encode"),
        (f"{EXPORTER}.runbook_pages", False, f"from {MONITORING}.site import load_config"),
        (f"{EXPORTER}.app", False, f"importlib.import_module('{MONITORING}.runbooks')"),
        (f"{EXPORTER}.app", False, f"importlib.resources.files('{MONITORING}.runbooks')"),
        (f"{CORE}.store", True, f"from {EXPORTER}.catalogue import CATALOGUE"),
        (f"{CORE}.queue.worker", False, f"from {MONITORING} import queries"),
        (f"{CORE}.queue.worker", False, f"from {MONITORING} import kubernetes"),
        (DEPLOY_COMMAND, False, f"from {MONITORING}.site import load_config"),
        (DEPLOY_COMMAND, False, f"from {EXPORTER}.catalogue import CATALOGUE"),
        (f"{MONITORING}.worker_options", False, "from .alerts import prometheus_rules"),
        ("<scripts/generate.py>", False, "from alerts.spec import alert_specs"),
        ("<tests/x.py>", False, "import dashboards.encode"),
    ],
)
def test_a_forbidden_import_is_reported(module: str, is_package: bool, source: str) -> None:
    assert violations(module, imported(source, module, is_package)), source


def test_relative_imports_resolve_from_the_module_package() -> None:
    assert f"{MONITORING}.config" in imported("from .config import X", f"{MONITORING}.spec", False)
    assert f"{MONITORING}.spec" in imported("from ..spec import X", f"{MONITORING}.alerts.a", False)
    assert f"{MONITORING}.alerts.x" in imported("from . import x", f"{MONITORING}.alerts", True)


def test_the_deploy_command_may_import_the_kubernetes_renderer_alone() -> None:
    allowed = imported(f"from {MONITORING} import kubernetes", DEPLOY_COMMAND, False)
    assert KUBERNETES in allowed and violations(DEPLOY_COMMAND, allowed) == []
    # The door is that one module's: any other core module importing it is reported.
    assert violations(f"{CORE}.cli.root", allowed)
