"""The JobStore (platform_common.jobs.store): its contract on memory, Redis and Redis Cluster,
each backend beyond the contract, records, the per-owner time index, the HTTP router and
telemetry."""
