"""Test-only helpers: Redis servers, clusters and Sentinels; worker, chaos and Prometheus
processes; queue handlers; the JobStore harness; backend selection."""
