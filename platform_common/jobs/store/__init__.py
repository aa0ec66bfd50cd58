"""The JobStore: its contract, the memory:// and redis:// backends, the per-owner time
index, telemetry and the FastAPI router. `platform_common.jobs` re-exports the public API."""
