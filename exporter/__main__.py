"""`python -m platform_common.jobs_exporter` or `queue-exporter`: settings, then uvicorn."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import uvicorn

from platform_common.jobs.errors import ConfigurationError

from .app import create_app
from .settings import ExporterSettings

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the exporter until SIGINT/SIGTERM; exit 2 on a bad setting."""
    try:
        settings = ExporterSettings.from_args(sys.argv[1:] if argv is None else argv)
    except ConfigurationError as exc:
        # The message names the flag or variable; RedisSettings never echoes a password.
        print(f"queue-exporter: configuration error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("exporter").info(
        "serving on %s:%d, Redis %s", settings.host, settings.port, settings.redis.redacted_url()
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,  # Prometheus scrapes every few seconds: access lines are noise
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
