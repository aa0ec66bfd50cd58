"""Alerts as code: one spec, generated into Grafana provisioning, Prometheus rules and runbooks."""
