"""Each fact is declared once: no metric name and no default Redis URL is typed as a
string in a second module of the installed packages (the others import it)."""

from __future__ import annotations

import ast
from collections import defaultdict

from platform_common.jobs.metric_catalogue import CATALOGUE
from platform_common.jobs.redis.url import DEFAULT_REDIS_URL
from tests.support.paths import REPO_ROOT

PACKAGE_FOLDERS = ("platform_common", "exporter", "monitoring", "dashboards", "alerts", "runbooks")


def modules_by_string() -> dict[str, set[str]]:
    """Every string constant of the packages' modules -> the modules that type it."""
    found: dict[str, set[str]] = defaultdict(set)
    for folder in PACKAGE_FOLDERS:
        for path in (REPO_ROOT / folder).rglob("*.py"):
            module = str(path.relative_to(REPO_ROOT))
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found[node.value].add(module)
            for name in exported(tree):  # `__all__` names the module's own members
                found[name].discard(module)
    return found


def exported(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            names: list[str] = ast.literal_eval(node.value)
            return names
    return []


def test_each_metric_name_is_typed_in_the_catalogue_only() -> None:
    typed = modules_by_string()
    # A name equal to its key is also typed wherever code looks the metric up by key.
    names = [metric.name for metric in CATALOGUE if metric.name != metric.key]
    assert len(names) > 20  # the catalogue was read
    elsewhere = {
        name: sorted(typed[name] - {"platform_common/jobs/metric_catalogue.py"}) for name in names
    }
    assert {name: modules for name, modules in elsewhere.items() if modules} == {}


def test_the_default_redis_url_is_typed_nowhere() -> None:
    # redis/url.py builds it from the default port: no module types the URL itself.
    assert modules_by_string().get(DEFAULT_REDIS_URL, set()) == set()
