"""Alert renderers: Grafana file provisioning, the Prometheus rule file and its promtool tests."""
