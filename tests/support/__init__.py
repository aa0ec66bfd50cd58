"""Test-only helpers: launchers for Prometheus, Alertmanager and worker processes."""
