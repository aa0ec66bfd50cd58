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

A test (or module) marked `@pytest.mark.valkey` runs on the session valkey-server too:
its backend fixture gets a `valkey` param, and a test elsewhere that uses `redis_url`
gets it parametrized over `single` and `valkey` (`parametrize_redis_url`, from the root
conftest). Only the subset a second server family can break is marked (README.md,
"Minimum versions", says which and why), so the long, sleep-bound tests do not run twice.

A fault-injection module marked `pytest.mark.cluster_sample(planted=(...))` runs every
case on the single node and a sample on the cluster: per test function, one case for
each combination of its other parameters (key roles, modes), the planted content (the
wrong type, the malformed value: the `planted` parameters) rotating across the module. The
others are reported as deselected. `fixture="env"` names a module's own backend fixture.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

__all__ = [
    "BACKEND_FIXTURES",
    "CLUSTER",
    "SINGLE",
    "VALKEY",
    "check_single_node_markers",
    "check_valkey_markers",
    "parametrize_backends",
    "parametrize_redis_url",
    "sample_cluster_cases",
]

CLUSTER = "cluster"
SINGLE = "single"
VALKEY = "valkey"
"""The backend param of the session valkey-server, and the name of its marker."""
SINGLE_NODE = "single_node"
CLUSTER_SAMPLE = "cluster_sample"

BACKEND_FIXTURES = frozenset({"store_backend", "redis_backend"})
"""The parametrized backend fixtures (tests/store/conftest.py, tests/queue/conftest.py)."""


def parametrize_backends(metafunc: pytest.Metafunc, fixture: str, backends: Sequence[str]) -> None:
    """Parametrize `fixture` (indirectly) over `backends` for a test that uses it."""
    if fixture not in metafunc.fixturenames:
        return
    assert fixture in BACKEND_FIXTURES, f"add {fixture} to BACKEND_FIXTURES"
    single_node = metafunc.definition.get_closest_marker(SINGLE_NODE) is not None
    chosen = [b for b in backends if not (single_node and b == CLUSTER)]
    if metafunc.definition.get_closest_marker(VALKEY) is not None:
        chosen.append(VALKEY)
    metafunc.parametrize(fixture, chosen, indirect=True, scope="function")


def parametrize_redis_url(metafunc: pytest.Metafunc) -> None:
    """A `valkey` test outside the backend folders: `redis_url` (indirectly) over the
    session redis-server and the session valkey-server."""
    names = set(metafunc.fixturenames)
    if metafunc.definition.get_closest_marker(VALKEY) is None or "redis_url" not in names:
        return
    if BACKEND_FIXTURES & names:
        return  # its folder's backend fixture adds the valkey param (parametrize_backends)
    metafunc.parametrize("redis_url", [SINGLE, VALKEY], indirect=True, scope="function")


def check_valkey_markers(items: Sequence[pytest.Item]) -> None:
    """A `valkey` marker must mark a test that reaches a server through a backend fixture
    or `redis_url`: on any other it would silently run on Redis alone."""
    for item in items:
        if item.get_closest_marker(VALKEY) is None:
            continue
        names = set(getattr(item, "fixturenames", ()))
        if not (BACKEND_FIXTURES | {"redis_url"}) & names:
            raise pytest.UsageError(
                f"{item.nodeid}: marked {VALKEY} but uses no backend fixture nor redis_url"
            )


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


def sample_cluster_cases(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep, of the cluster cases of a `cluster_sample` module, one per test function and
    combination of its parameters other than the planted ones (see the module doc)."""
    groups: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        key = _sample_group(item)
        if key is not None:
            groups.setdefault(key, []).append(item)
    kept: set[str] = set()
    ordinal: dict[str, int] = {}  # per module, so the planted content varies across tests
    for (function, _), cases in groups.items():
        module = function.split("::", 1)[0]
        index = ordinal.get(module, 0)
        ordinal[module] = index + 1
        kept.add(cases[index % len(cases)].nodeid)
    dropped = [item for key, cases in groups.items() for item in cases if item.nodeid not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = {item.nodeid for item in dropped}
        items[:] = [item for item in items if item.nodeid not in gone]


def _sample_group(item: pytest.Item) -> tuple[str, str] | None:
    """(test function, its non-planted parameter values) for a cluster case of a
    `cluster_sample` module; None for any other item."""
    marker = item.get_closest_marker(CLUSTER_SAMPLE)
    callspec = getattr(item, "callspec", None)
    if marker is None or callspec is None:
        return None
    backends = {marker.kwargs["fixture"]} if "fixture" in marker.kwargs else BACKEND_FIXTURES
    if not any(callspec.params.get(name) == CLUSTER for name in backends):
        return None
    planted = set(marker.kwargs.get("planted", ()))
    others = sorted(
        (name, repr(value))
        for name, value in callspec.params.items()
        if name not in planted and name not in backends
    )
    return item.nodeid.split("[", 1)[0], repr(others)
