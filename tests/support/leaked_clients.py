"""Names the test that created a cluster client the garbage collector finds still open.

Some full runs (never a subset) collect an open ClusterClient, with its nodes and
sockets, inside a later test after its event loop closed; redis-py's ResourceWarnings
then name neither the client's test nor its caller. tests/conftest.py installs this so
the run's warnings summary says `LeakedClusterClient: created in <test> ...`: the
leak stays visible, and the next run that sees it names its owner, without failing a
test that only happened to run the collector.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from platform_common.jobs.redis.clients import ClusterClient

__all__ = ["LeakedClusterClient", "install"]


class LeakedClusterClient(UserWarning):
    """A ClusterClient was collected without aclose(); the message names its test."""


def install() -> None:
    """Record the current test in every ClusterClient and warn when one is collected open."""
    init = ClusterClient.__init__
    collected = ClusterClient.__del__

    def recording_init(self: ClusterClient, *args: Any, **kwargs: Any) -> None:
        self._created_in = os.environ.get("PYTEST_CURRENT_TEST", "no test")  # type: ignore[attr-defined]
        init(self, *args, **kwargs)

    def naming_del(self: ClusterClient, *args: Any, **kwargs: Any) -> None:
        if getattr(self, "_initialize", True) is False:  # initialised, never closed
            created = getattr(self, "_created_in", "no test")
            message = f"created in {created}, collected open"
            warnings.warn(message, LeakedClusterClient, stacklevel=1)
        collected(self, *args, **kwargs)

    ClusterClient.__init__ = recording_init  # type: ignore[method-assign]
    ClusterClient.__del__ = naming_del  # type: ignore[method-assign,assignment]
