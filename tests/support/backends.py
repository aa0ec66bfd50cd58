"""Which backends a test runs on: every backend its folder's fixture offers, except the
cluster for a test marked `@pytest.mark.single_node("why it cannot run on a cluster")`.

A folder's conftest names a backend fixture and its backends, and parametrizes it from
its own `pytest_generate_tests`:

    def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
        parametrize_backends(metafunc, "redis_backend", ("single", CLUSTER))

The fixture turns `request.param` into a URL or a store; it asks for the session cluster
(`request.getfixturevalue("cluster_url")`) only for the cluster param, so the cluster
starts only when a cluster test runs. A single-node test gets no cluster param at all
(it is not generated, so nothing is reported as skipped).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

__all__ = ["BACKEND_FIXTURES", "CLUSTER", "check_single_node_markers", "parametrize_backends"]

CLUSTER = "cluster"
SINGLE_NODE = "single_node"

BACKEND_FIXTURES = frozenset({"store_backend", "redis_backend"})
"""The parametrized backend fixtures (tests/store/conftest.py, tests/queue/conftest.py)."""


def parametrize_backends(metafunc: pytest.Metafunc, fixture: str, backends: Sequence[str]) -> None:
    """Parametrize `fixture` (indirectly) over `backends` for a test that uses it."""
    if fixture not in metafunc.fixturenames:
        return
    assert fixture in BACKEND_FIXTURES, f"add {fixture} to BACKEND_FIXTURES"
    single_node = metafunc.definition.get_closest_marker(SINGLE_NODE) is not None
    chosen = [b for b in backends if not (single_node and b == CLUSTER)]
    metafunc.parametrize(fixture, chosen, indirect=True, scope="function")


def check_single_node_markers(items: Sequence[pytest.Item]) -> None:
    """A `single_node` marker must say why, and must mark a test that would otherwise run
    on a cluster param (elsewhere it would silently mean nothing)."""
    for item in items:
        marker = item.get_closest_marker(SINGLE_NODE)
        if marker is None:
            continue
        reason = marker.args[0] if len(marker.args) == 1 and not marker.kwargs else None
        if not isinstance(reason, str) or not reason.strip():
            raise pytest.UsageError(f"{item.nodeid}: write @pytest.mark.{SINGLE_NODE}('reason')")
        if not BACKEND_FIXTURES & set(getattr(item, "fixturenames", ())):
            raise pytest.UsageError(
                f"{item.nodeid}: marked {SINGLE_NODE} but uses no backend fixture "
                f"({', '.join(sorted(BACKEND_FIXTURES))}): it never runs on a cluster anyway"
            )
