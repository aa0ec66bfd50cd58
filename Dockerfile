# One image for every process of the package: the queue worker, the Prometheus exporter,
# the operator CLI and the queue console (`agentjobs console`).
# Build: docker build -t platform-common-jobs:0.2.0 .
# Agent services build FROM it and add their handler code; tests/deploy/test_dockerfile.py
# checks offline what can be checked without a Docker daemon.

# Stage 1: build the wheel (and its dependencies' wheels) with the build tools.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
RUN pip install --no-cache-dir --disable-pip-version-check "setuptools>=77" wheel
COPY pyproject.toml README.md ./
COPY platform_common ./platform_common
COPY exporter ./exporter
COPY monitoring ./monitoring
COPY dashboards ./dashboards
COPY alerts ./alerts
COPY runbooks ./runbooks
RUN pip wheel --no-cache-dir --disable-pip-version-check --wheel-dir /wheels ".[exporter,cli,console]"

# Stage 2: the runtime. No compiler, no pip cache, no sources: only the installed wheels.
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --disable-pip-version-check --no-index --find-links /wheels \
        "platform-common-jobs[exporter,cli,console]" \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin agentjobs
USER 10001
# The exporter's port; workers listen on nothing.
EXPOSE 9808
# No ENTRYPOINT: each Deployment names its command, one of
#   queue-exporter                                  (the exporter)
#   python -m platform_common.jobs.worker ...       (a worker; also `agentjobs worker`)
#   python -m platform_common.jobs.heartbeat_probe  (a worker's liveness probe)
#   agentjobs ...                                   (the operator CLI)
#   agentjobs console --host 0.0.0.0 ...            (the queue console)
CMD ["agentjobs", "--help"]
