"""Grafana dashboards as code (grafanalib 0.7.1), rendered into `dashboards/*.json`."""
